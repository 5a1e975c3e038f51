"""Topics the offsets reader (transport fix 14) finds unknown: said once, and the worker
consumer's metadata refreshed, then quiet until the topic is back.

aiokafka's ListOffsets retries a partition it knows no leader for every ``retry_backoff_ms``
(100 ms), asking the cluster's metadata of its topic each time, and every answer without the
topic logged ERROR "Topic ... not found in cluster metadata": about ten lines a second for as
long as a changelog was deleted. The reader's metadata now leaves an unknown topic out without
a line (`quiet_metadata`), and `UnknownTopics` says each one once.

Before fix 14 the worker consumer asked offsets itself, and each of those retries refreshed its
metadata as a side effect, so it saw a topic deleted or created again at once and rejoined the
group. The reader's retries refresh only its own; so as the reader finds a topic unknown, and
as it finds it back, the worker consumer's metadata is refreshed too (`TopicCheck`), for every
topic it is asked about. Not on every retry: the worker consumer's own metadata names each
topic it subscribes to, and says at ERROR each time that one is missing (for a table's changelog
at DEBUG: `streamapp.quiet_logs`). Delete with fix 14.
Tests: tests/unit/streamapp/faust_compat/test_unknown_topics.py;
tests/integration/test_changelog_deleted.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Set
from dataclasses import dataclass
from typing import Any

from faust.types import TP

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Change:
    """What one look at the asked topics changed: topics newly unknown, topics back."""

    gone: frozenset[str] = frozenset()
    back: frozenset[str] = frozenset()


class UnknownTopics:
    """The asked topics the offsets reader found unknown; logs each once as it goes, and once
    as it comes back. Pure: fed the topics asked and those unknown among them."""

    def __init__(self, reported_elsewhere: Callable[[str], bool]) -> None:
        #: True for a topic another part of streamapp already says is missing (a table's
        #: changelog: `streamapp.changelog_watch`); said here at DEBUG only, not twice.
        self.reported_elsewhere = reported_elsewhere
        self.unknown: set[str] = set()

    def observe(self, asked: Iterable[str], unknown: Set[str]) -> Change:
        asked = set(asked)
        gone = frozenset(unknown - self.unknown)
        back = frozenset((self.unknown & asked) - unknown)
        self.unknown = (self.unknown - back) | gone
        for topic in sorted(gone):
            self._say(
                topic,
                "streamapp: topic %s is unknown to the cluster (deleted, not created yet, or not "
                "authorized): its offsets are not read until it is back; create it again, or "
                "restart the workers (Faust creates the topics an app declares as it starts)",
            )
        for topic in sorted(back):
            self._say(topic, "streamapp: topic %s is known to the cluster again")
        return Change(gone, back)

    def _say(self, topic: str, text: str) -> None:
        level = logging.DEBUG if self.reported_elsewhere(topic) else logging.WARNING
        logger.log(level, text, topic)


def unknown_among(cluster: Any, partitions: Collection[TP]) -> set[str]:
    """The topics of ``partitions`` that aiokafka's ``cluster`` (a ClusterMetadata) does not
    know, or knows without one of the asked partitions (created again with fewer)."""
    unknown: set[str] = set()
    for tp in partitions:
        known = cluster.partitions_for_topic(tp.topic)
        if known is None or tp.partition not in known:
            unknown.add(tp.topic)
    return unknown


def quiet_metadata(reader: Any) -> None:
    """The reader's metadata leaves a topic it cannot describe out without a line.

    aiokafka's ``ClusterMetadata.need_all_topic_metadata`` skips the per-topic errors of an
    answer (as for a fetch of all topics), which it logged at ERROR on each of ListOffsets'
    retries; a topic left out is one `UnknownTopics` says (``AIOKafkaConsumer._client``).
    The worker consumer keeps aiokafka's lines: they are the only word of a source topic
    deleted while the workers run.
    """
    reader._client.cluster.need_all_topic_metadata = True


class TopicCheck:
    """Run before each offsets request of the reader, in the consumer thread."""

    def __init__(
        self, unknown_topics: UnknownTopics, refresh_worker_metadata: Callable[[], None]
    ) -> None:
        self.unknown_topics = unknown_topics
        self.refresh_worker_metadata = refresh_worker_metadata

    async def before_asking(self, reader: Any, partitions: Collection[TP]) -> None:
        """Fresh reader metadata where a topic asked is unknown (or was); say what changed,
        and refresh the worker consumer's metadata as a topic goes unknown and as it is back.

        aiokafka's ListOffsets then waits, quietly, for a topic still unknown as it did before.
        """
        client = reader._client
        asked = {tp.topic for tp in partitions}
        unknown = unknown_among(client.cluster, partitions)
        if unknown or asked & self.unknown_topics.unknown:
            for topic in unknown:
                client.add_topic(topic)  # the reader asks metadata of the topics it tracks
            await client.force_metadata_update()
            unknown = unknown_among(client.cluster, partitions)
        change = self.unknown_topics.observe(asked, unknown)
        if change.gone or change.back:
            self.refresh_worker_metadata()
