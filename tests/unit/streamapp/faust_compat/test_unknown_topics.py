"""Topics the offsets reader finds unknown: said once, the worker consumer's metadata refreshed
as one goes and comes back, and the reader's metadata quiet about them (no broker)."""

from __future__ import annotations

import logging

import pytest
from aiokafka.cluster import ClusterMetadata
from aiokafka.protocol.metadata import MetadataResponse_v1
from faust.types import TP

from streamapp.faust_compat.unknown_topics import (
    TopicCheck,
    UnknownTopics,
    quiet_metadata,
    unknown_among,
)

UNKNOWN_TOPIC_OR_PARTITION = 3


def metadata(topics: dict[str, int], missing: tuple[str, ...] = ()) -> object:
    """A metadata answer (v1) of one broker, leading ``topics`` with their partition counts,
    and with UNKNOWN_TOPIC_OR_PARTITION for ``missing``."""
    described = [
        (0, topic, False, [(0, p, 0, [0], [0]) for p in range(count)])
        for topic, count in topics.items()
    ]
    described += [(UNKNOWN_TOPIC_OR_PARTITION, topic, False, []) for topic in missing]
    return MetadataResponse_v1([(0, "127.0.0.1", 9092, None)], 0, described)


def test_each_unknown_topic_is_said_once_until_it_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    topics = UnknownTopics(reported_elsewhere=lambda topic: topic == "app-counts-changelog")
    caplog.set_level(logging.DEBUG, logger="streamapp.faust_compat.unknown_topics")
    first = topics.observe({"a", "app-counts-changelog"}, {"a", "app-counts-changelog"})
    assert first.gone == {"a", "app-counts-changelog"} and not first.back
    for _ in range(5):  # every later ask while they stay unknown: nothing new
        again = topics.observe({"a", "app-counts-changelog"}, {"a", "app-counts-changelog"})
        assert not again.gone and not again.back
    # A topic not asked this time is no news of it.
    assert not topics.observe({"b"}, set()).back
    back = topics.observe({"a"}, set())
    assert back.back == {"a"} and not back.gone
    assert topics.unknown == {"app-counts-changelog"}

    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert said == [
        (
            logging.WARNING,
            "streamapp: topic a is unknown to the cluster (deleted, not created yet, or not "
            "authorized): its offsets are not read until it is back; create it again, or "
            "restart the workers (Faust creates the topics an app declares as it starts)",
        ),
        # The changelog watch says a missing changelog in a line of its own.
        (logging.DEBUG, said[1][1]),
        (logging.WARNING, "streamapp: topic a is known to the cluster again"),
    ]
    assert "app-counts-changelog is unknown" in said[1][1]


def test_a_topic_is_unknown_without_one_of_the_partitions_asked() -> None:
    cluster = ClusterMetadata()
    cluster.update_metadata(metadata({"t": 2, "u": 4}))
    asked = [TP("t", 0), TP("t", 3), TP("u", 1), TP("gone", 0)]
    assert unknown_among(cluster, asked) == {"t", "gone"}


def test_the_reader_s_metadata_leaves_an_unknown_topic_out_without_a_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Client:
        cluster = ClusterMetadata()

    class Reader:
        _client = Client()

    quiet_metadata(Reader)
    caplog.set_level(logging.DEBUG, logger="aiokafka.cluster")
    Reader._client.cluster.update_metadata(metadata({"t": 2}, missing=("gone",)))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert Reader._client.cluster.partitions_for_topic("gone") is None
    assert Reader._client.cluster.partitions_for_topic("t") == {0, 1}


class FakeClient:
    """aiokafka's client of the reader: its metadata answers with what the broker has now."""

    def __init__(self, broker: dict[str, int]) -> None:
        self.broker = broker
        self.cluster = ClusterMetadata()
        self.cluster.need_all_topic_metadata = True
        self.tracked: set[str] = set()
        self.updates = 0

    def add_topic(self, topic: str) -> None:
        self.tracked.add(topic)

    async def force_metadata_update(self) -> bool:
        self.updates += 1
        known = {t: n for t, n in self.broker.items() if t in self.tracked}
        self.cluster.update_metadata(metadata(known, tuple(self.tracked - set(self.broker))))
        return True


async def test_the_worker_metadata_is_refreshed_as_a_topic_goes_and_as_it_is_back() -> None:
    client = FakeClient({"t": 2})

    class Reader:
        _client = client

    refreshed: list[int] = []
    check = TopicCheck(UnknownTopics(lambda _t: False), lambda: refreshed.append(client.updates))
    asked = [TP("t", 0), TP("t", 1)]
    await check.before_asking(Reader, asked)  # not in the reader's metadata yet: asked for
    assert client.updates == 1 and refreshed == []
    await check.before_asking(Reader, asked)  # known: no metadata asked
    assert client.updates == 1 and refreshed == []

    del client.broker["t"]
    client.cluster.update_metadata(metadata({}, ("t",)))  # the reader learns it is gone
    await check.before_asking(Reader, asked)
    assert refreshed == [2]  # as it goes
    await check.before_asking(Reader, asked)
    await check.before_asking(Reader, asked)
    assert refreshed == [2] and client.updates == 4  # still gone: asked again, quietly

    client.broker["t"] = 2
    await check.before_asking(Reader, asked)
    assert refreshed == [2, 5]  # as it is back
    await check.before_asking(Reader, asked)
    assert refreshed == [2, 5] and client.updates == 5
