"""partition_wait: a worker producer's send to a partition it does not know waits until it is
there.

The producer here is a stand-in holding just what the wait reads: a client whose metadata
refresh, like aiokafka's, brings only the topics the client tracks, and ``partitions_for``,
which tracks a topic and waits for its metadata (raising if the broker does not have it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import UnknownTopicOrPartitionError
from aiokafka.protocol.metadata import MetadataResponse_v1

from streamapp.runtime.producer import client as producer_client
from streamapp.runtime.producer.client import WorkerProducer
from streamapp.runtime.producer.partition_wait import wait_for_partition


class _Cluster:
    def __init__(self) -> None:
        self.known: dict[str, set[int]] = {}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.known.get(topic)


class _Client:
    def __init__(self, broker: dict[str, set[int]], tracked: set[str]) -> None:
        self.broker = broker
        self.tracked = tracked
        self.cluster = _Cluster()
        self.refreshes = 0

    async def force_metadata_update(self) -> None:
        self.refreshes += 1
        self.cluster.known = {t: set(self.broker[t]) for t in self.tracked if t in self.broker}


class _Producer:
    def __init__(self, broker: dict[str, set[int]], tracked: set[str]) -> None:
        self.client = _Client(broker, tracked)

    async def partitions_for(self, topic: str) -> set[int]:
        self.client.tracked.add(topic)
        await self.client.force_metadata_update()
        found = self.client.cluster.partitions_for_topic(topic)
        if found is None:
            raise UnknownTopicOrPartitionError()
        return found


async def test_a_topic_the_producer_never_sent_to_is_looked_up_not_waited_for() -> None:
    # The first changelog write of an exactly_once transactional producer: the topic exists,
    # but this producer's client tracks other topics only. A refresh alone never brings it.
    producer = _Producer({"orders": {0, 1}, "counts-changelog": {0, 1, 2}}, tracked={"orders"})
    await asyncio.wait_for(wait_for_partition(producer, "counts-changelog", 2), timeout=5)
    assert "counts-changelog" in producer.client.tracked


async def test_a_missing_changelog_is_waited_for_until_it_is_there() -> None:
    broker: dict[str, set[int]] = {"counts-changelog": {0}}  # recreated with 1 partition
    producer = _Producer(broker, tracked={"counts-changelog"})
    producer.client.cluster.known = {"counts-changelog": {0}}
    waiting = asyncio.ensure_future(wait_for_partition(producer, "counts-changelog", 3))
    while producer.client.refreshes < 3:
        await asyncio.sleep(0.01)
    assert not waiting.done()
    broker["counts-changelog"] = {0, 1, 2, 3}  # recreated right
    await asyncio.wait_for(waiting, timeout=5)


async def test_a_known_partition_does_not_wait() -> None:
    producer = _Producer({"t": {0}}, tracked={"t"})
    producer.client.cluster.known = {"t": {0}}
    await wait_for_partition(producer, "t", 0)
    assert producer.client.refreshes == 0


def _metadata_with(topic: str, partitions: int) -> Any:
    """A metadata answer (v1) of one broker leading every partition of ``topic``."""
    described = [(0, topic, False, [(0, p, 0, [0], [0]) for p in range(partitions)])]
    return MetadataResponse_v1([(0, "127.0.0.1", 9092, None)], 0, described)


class _AiokafkaSend(AIOKafkaProducer):  # type: ignore[misc]
    """aiokafka's producer as the worker producer's send sees it: the stand-in's client, and a
    send that notes what it was given."""

    def __init__(self, **options: Any) -> None:
        self.client = _Client({"t": {0, 1, 2}}, tracked={"t"})
        self.sent: list[tuple[str, int | None]] = []

    async def send(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        self.sent.append((topic, kw.get("partition")))


class _StandInWorkerProducer(WorkerProducer, _AiokafkaSend):
    pass


async def test_a_send_enters_the_wait_only_for_a_partition_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waited: list[tuple[str, int]] = []

    async def wait(self: Any, topic: str, partition: int) -> None:
        waited.append((topic, partition))
        self.client.cluster.known[topic] = {0, 1, 2}

    monkeypatch.setattr(producer_client, "wait_for_partition", wait)
    producer = _StandInWorkerProducer()
    producer.client.cluster.known = {"t": {0}}
    await producer.send("t", b"v", b"k", partition=0)  # known: no wait
    await producer.send("t", b"v", b"k")  # the partitioner's choice: no wait
    assert waited == []
    await producer.send("t", b"v", b"k", partition=2)  # unknown: waits first
    assert waited == [("t", 2)]
    assert producer.sent == [("t", 0), ("t", None), ("t", 2)]


async def test_a_plain_producer_s_send_to_an_unknown_partition_raises_as_aiokafka_s() -> None:
    """aiokafka's own send is left as it is: a plain producer in the process asserts."""
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9")
    try:
        producer.client.cluster.update_metadata(_metadata_with("t", 1))
        with pytest.raises(AssertionError, match="Unrecognized partition"):
            await producer.send("t", b"v", partition=2)
    finally:
        await producer.stop()
