"""A table's changelog topic deleted, or recreated with another partition count, while the
workers run: each worker says so in one line, naming the changelog, how it is wrong and what
to do, and says again once the topic is right.

The startup check (`streamapp.topic_check`) covers the topics as a worker starts; this covers
them while it runs. With the topic gone, the broker refuses the table's writes (it does not
create topics, `streamapp.kafka.broker`), and the leader plans without the changelog's
partitions, so the table's partitions go unserved: without this line nothing said why. Once
the topic is back with its partitions, the leader's metadata sees it and the group rebalances;
a local store whose offset is then beyond the (empty) changelog's end is set aside and rebuilt
from it (`tables.recovery`, `tables.store_guard`).

Asked every `CHECK_INTERVAL_S`, through the admin client's metadata of all topics (which never
creates one); a failed read is skipped, as the next one may succeed. The admin client's log is
a streamapp client's (`streamapp.runtime.client_log`): a broker it cannot reach is counted in
the worker's one outage, not logged at each check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from faust.types import AppT

from streamapp.runtime.client_log import ClientLog
from streamapp.topic_check import (
    TableTopic,
    TopicCheckError,
    declared_topics,
    read_partition_counts,
)

logger = logging.getLogger(__name__)

#: How often each worker reads the changelogs' partition counts. A deleted changelog stalls its
#: table at once; a few seconds to say why is soon enough, and a metadata request that rare
#: costs the broker nothing.
CHECK_INTERVAL_S = 5.0


def watched_changelogs(app: AppT) -> frozenset[str]:
    """The changelogs a worker of ``app`` watches: those of its tables (not global ones)."""
    return frozenset(t.changelog for t in declared_topics(app).tables)


@dataclass(frozen=True)
class ChangelogState:
    """A table's changelog and the partitions it has now (None: the topic does not exist)."""

    table: TableTopic
    have: int | None

    @property
    def right(self) -> bool:
        return self.have == self.table.partitions


def changelog_states(
    tables: Sequence[TableTopic], existing: Mapping[str, int]
) -> list[ChangelogState]:
    return [ChangelogState(t, existing.get(t.changelog)) for t in tables]


def describe_wrong(state: ChangelogState, *, create_hint: str) -> str:
    table = state.table
    want = table.partitions
    if state.have is None:
        how = "is missing (deleted while the workers run?)"
        todo = (
            f"create it with {want} partitions ({create_hint}), or restart the workers: "
            f"Faust creates a missing changelog with {want} partitions as it starts"
        )
    else:
        how = f"has {state.have} partitions instead of {want}"
        todo = (
            f"delete it and create it again with {want} partitions ({create_hint}); "
            "a topic cannot lose partitions"
        )
    return (
        f"streamapp: changelog {table.changelog} of table {table.table} {how}: the table's "
        f"partitions are not served and its writes fail until it is right; {todo}. Local "
        "stores beyond the new topic's end are then rebuilt from it"
    )


class ChangelogWatch:
    """Reads the changelogs' partition counts and logs each change of their state once."""

    def __init__(
        self,
        bootstrap: str,
        tables: Sequence[TableTopic],
        replication: int,
        *,
        on_right_again: Callable[[str], None] | None = None,
        client_id: str = "changelog watch",
    ) -> None:
        self.bootstrap = bootstrap
        #: Names the worker in the log of the watch's admin clients (a broker outage is said
        #: once for all the worker's clients, `streamapp.runtime.client_log`).
        self.client_id = client_id
        self.tables = list(tables)
        self.replication = replication
        #: Called with a changelog's name once it is right again (the worker refreshes its
        #: consumer's metadata, so the group plans with the topic's partitions again): a
        #: changelog created again with its right count after a wrong one is no unknown topic
        #: to the consumer, which would go on planning with the count its stale metadata has.
        self.on_right_again = on_right_again
        #: changelog -> the wrong partition count last reported (None: missing).
        self.reported: dict[str, int | None] = {}

    def create_hint(self, state: ChangelogState) -> str:
        t = state.table
        return (
            f"kafka-topics.sh --bootstrap-server {self.bootstrap} --create --topic "
            f"{t.changelog} --partitions {t.partitions} --replication-factor {self.replication}"
            " --config cleanup.policy=compact"
        )

    async def check(self) -> None:
        if not self.tables:
            return
        client_log = ClientLog("changelog watch", self.client_id)
        try:
            with client_log.scope():
                existing = await read_partition_counts(
                    self.bootstrap, [t.changelog for t in self.tables]
                )
        except TopicCheckError:
            return  # the broker is unreachable for now: the client's log says so
        finally:
            client_log.close()
        self.observe(changelog_states(self.tables, existing))

    def observe(self, states: Sequence[ChangelogState]) -> None:
        for state in states:
            topic = state.table.changelog
            if not state.right:
                if topic not in self.reported or self.reported[topic] != state.have:
                    self.reported[topic] = state.have
                    logger.warning(describe_wrong(state, create_hint=self.create_hint(state)))
            elif topic in self.reported:
                del self.reported[topic]
                logger.warning(
                    "streamapp: changelog %s of table %s is right again (%d partitions)",
                    topic,
                    state.table.table,
                    state.table.partitions,
                )
                if self.on_right_again is not None:
                    self.on_right_again(topic)
