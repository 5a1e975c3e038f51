"""A plain aiokafka consumer and producer in a process running a worker's Kafka clients behave as
aiokafka documents.

streamapp's group protocol (cooperative joins, prompt heartbeats, static membership) and its
producer's waits live in streamapp's own client classes (`streamapp.runtime.group`,
`streamapp.runtime.producer`), not in aiokafka's. Here a streamapp.App builds its worker's
consumer and producer, one of each runs (the consumer in a group of its own), and beside them:

- two plain ``AIOKafkaConsumer`` in a group: aiokafka's eager protocol with its own round robin
  assignor, the first one's rebalance revoking everything it owned before the second joins,
  and aiokafka's own coordinator class;
- a plain ``AIOKafkaProducer``: its send to a partition its metadata does not have raises
  aiokafka's ``Unrecognized partition`` at once, where the worker's producer waits for it.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.consumer.group_coordinator import GroupCoordinator

from streamapp import App
from streamapp.ops.group_read import describe_group
from streamapp.runtime import clients
from streamapp.runtime.group.consumer import WorkerConsumer
from streamapp.runtime.group.coordinator import Coordinator
from streamapp.runtime.producer.client import WorkerProducer
from streamapp.testing.kafka_io import create_topic

PARTITIONS = 4
#: A bound on waits for the broker: reached only when something is broken.
GIVE_UP_S = 60.0


class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """What aiokafka tells a consumer's listener, in order."""

    def __init__(self, changed: asyncio.Event) -> None:
        self.calls: list[tuple[str, set[int]]] = []
        self.changed = changed

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.calls.append(("revoked", {tp.partition for tp in revoked}))
        self.changed.set()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.calls.append(("assigned", {tp.partition for tp in assigned}))
        self.changed.set()

    async def until(self, count: int) -> None:
        """Until the listener was called ``count`` times."""
        while len(self.calls) < count:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), GIVE_UP_S)


def _split(first: Listener, second: Listener) -> bool:
    """Whether the two consumers' last assignments share the partitions two and two."""
    if not (first.calls and second.calls):
        return False
    (first_call, first_share), (second_call, second_share) = first.calls[-1], second.calls[-1]
    return (
        first_call == second_call == "assigned"
        and first_share | second_share == {0, 1, 2, 3}
        and len(first_share) == len(second_share) == 2
    )


def _plain_consumer(bootstrap: str, group: str, topic: str, listener: Listener) -> Any:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        heartbeat_interval_ms=300,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    consumer.subscribe([topic], listener=listener)
    return consumer


async def test_plain_clients_beside_a_worker_s_behave_as_aiokafka_s(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = f"stock-clients-{uuid.uuid4().hex[:8]}"
    await create_topic(kafka_bootstrap, topic, PARTITIONS)
    app = App(
        f"stock-clients-{uuid.uuid4().hex[:8]}",
        broker=f"kafka://{kafka_bootstrap}",
        client_id="stock-worker",
        datadir=str(tmp_path),
    )
    # The worker's clients, as its transport builds them; the producer runs, and a worker
    # consumer runs in a group of its own.
    worker_producer = app.producer.new_client()  # type: ignore[attr-defined]
    built = clients.worker_consumer(app, app.transport)
    assert isinstance(worker_producer, WorkerProducer) and isinstance(built, WorkerConsumer)
    worker_consumer = WorkerConsumer(
        topic,
        bootstrap_servers=kafka_bootstrap,
        group_id=f"stock-worker-group-{uuid.uuid4().hex[:8]}",
        client_id="stock-worker",
        heartbeat_interval_ms=300,
    )
    group = f"stock-plain-{uuid.uuid4().hex[:8]}"
    changed = asyncio.Event()  # either listener was called
    first_listener, second_listener = Listener(changed), Listener(changed)
    first = _plain_consumer(kafka_bootstrap, group, topic, first_listener)
    second = _plain_consumer(kafka_bootstrap, group, topic, second_listener)
    plain_producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    started: list[Any] = []
    try:
        for client in (worker_producer, worker_consumer, plain_producer, first):
            await client.start()
            started.append(client)
        assert type(worker_consumer._coordinator) is Coordinator

        # The first plain consumer alone: everything, after aiokafka's eager revoke of nothing.
        await first_listener.until(2)
        assert first_listener.calls[:2] == [("revoked", set()), ("assigned", {0, 1, 2, 3})]
        assert type(first._coordinator) is GroupCoordinator  # aiokafka's own

        # The second one joins: aiokafka's eager protocol revokes all a member owned before
        # each join, then each gets its round robin share.
        await second.start()
        started.append(second)
        while not _split(first_listener, second_listener):
            changed.clear()  # no await since the check: nothing is missed
            await asyncio.wait_for(changed.wait(), GIVE_UP_S)
        for listener in (first_listener, second_listener):
            owned: set[int] = set()
            for call, partitions in listener.calls:
                if call == "revoked":
                    assert partitions == owned, listener.calls  # everything it owned
                owned = partitions if call == "assigned" else set()
        assert ("revoked", {0, 1, 2, 3}) in first_listener.calls
        described = await describe_group(kafka_bootstrap, group)
        assert (described.protocol_type, described.protocol) == ("consumer", "roundrobin")

        # A plain producer's send to a partition it does not know raises at once, as aiokafka's.
        with pytest.raises(AssertionError, match="Unrecognized partition"):
            # (Bounded: a send that waited for the partition would wait for ever.)
            await asyncio.wait_for(
                plain_producer.send(topic, b"v", partition=PARTITIONS + 5), GIVE_UP_S
            )
        assert plain_producer._sender.client is plain_producer.client
        # The worker's producer, meanwhile, sends as aiokafka's does to a partition it knows.
        delivered = await (await worker_producer.send(topic, b"w", partition=1))
        assert delivered.partition == 1
        assert TopicPartition(topic, 1) in worker_consumer.assignment()
    finally:
        for client in reversed(started):
            await client.stop()
        await built.stop()
