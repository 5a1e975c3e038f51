"""What Faust and aiokafka ask of a partition assignor, answered from streamapp's own state.

Faust builds its assignor from the ``PartitionAssignor`` setting (`faust.types.assignor`'s
``PartitionAssignorT``) and aiokafka's group coordinator drives it as an
``AbstractPartitionAssignor``. `AssignorInterface` implements both interfaces and nothing
else: the leader's planning (`plan_group`), this worker's metadata (``metadata``) and what an
assignment means (``on_assignment``) are `streamapp.partition_assignor`'s, which hands each
assignment here through `hold`.

Who reads what:

- the tables' recovery and the stores: ``assigned_actives``, ``assigned_standbys``;
- transactions and commits: ``group_for_topic`` (a source partition's transaction is named
  after its topic's copartitioned group);
- ``app.router`` (``app.table_route``, ``app.topic_route``): ``key_store``,
  ``external_key_store``, ``table_metadata``, ``tables_metadata``,
  ``external_topics_metadata``;
- Faust's sensors: one ``on_assignment_*`` call around each plan the leader makes.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from faust.types import TP
from faust.types.assignor import HostToPartitionMap, PartitionAssignorT
from yarl import URL

#: The version of the member metadata and assignment envelopes (Faust's assignor sends 4;
#: streamapp's payload inside them carries its own version).
PROTOCOL_VERSION = 4


class AssignorInterface(AbstractPartitionAssignor, PartitionAssignorT):  # type: ignore[misc]
    """An assignor as Faust and aiokafka see it; what it holds is set by `hold`.

    Subclasses name the group protocol (``name``) and provide ``metadata``,
    ``on_assignment`` and `plan_group`.
    """

    def __init__(self, app: Any, replicas: int = 0) -> None:
        self.app = app
        self.replicas = replicas
        #: Partitions this worker processes, and those it keeps replicas of.
        self.active_tps: frozenset[TP] = frozenset()
        self.standby_tps: frozenset[TP] = frozenset()
        #: Topic -> its copartitioned group, the same on every worker of one assignment.
        self.topic_groups: dict[str, int] = {}
        #: Worker URL -> the changelog partitions it holds active (``changelog_urls`` by
        #: partition), and the same for every other topic (``external_urls``).
        self.changelog_distribution: HostToPartitionMap = {}
        self.external_topic_distribution: HostToPartitionMap = {}
        self.changelog_urls: dict[TP, str] = {}
        self.external_urls: dict[TP, str] = {}

    # -- aiokafka's AbstractPartitionAssignor --

    @property
    def version(self) -> int:
        return PROTOCOL_VERSION

    def assign(
        self,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        """The leader's assignment, reported to Faust's sensors (and its tracer, if set)."""
        tracer = self.app.tracer
        if tracer is None:
            return self._plan_reported(cluster, members)
        span = tracer.get_tracer("_faust").start_span(
            operation_name="coordinator_assignment",
            tags={"hostname": socket.gethostname()},
        )
        with span:
            planned = self._plan_reported(cluster, members)
            span.set_tag("assignment", planned)
        return planned

    def _plan_reported(
        self,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        sensors = self.app.sensors
        state = sensors.on_assignment_start(self)
        try:
            planned = self.plan_group(cluster, members)
        except MemoryError:
            raise
        except Exception as exc:
            sensors.on_assignment_error(self, state, exc)
            raise
        sensors.on_assignment_completed(self, state)
        return planned

    def plan_group(
        self,
        cluster: ClusterMetadata,
        member_metadata: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        """The leader's assignment of every member of the group."""
        raise NotImplementedError

    # -- what this worker holds --

    @property
    def url(self) -> str:
        """The web URL this worker announces to the group: where its tables' keys are served."""
        return str(self.app.conf.canonical_url)

    def hold(
        self,
        *,
        actives: Mapping[str, Iterable[int]],
        standbys: Mapping[str, Iterable[int]],
        topic_groups: Mapping[str, int],
        actives_by_url: Mapping[str, Mapping[str, Sequence[int]]],
    ) -> None:
        """Take an assignment: this worker's partitions, the topics' groups, and every
        worker's active partitions by its URL (for the router)."""
        self.active_tps = frozenset(_tps(actives))
        self.standby_tps = frozenset(_tps(standbys))
        self.topic_groups = dict(topic_groups)
        changelogs = set(self.app.tables.changelog_topics)
        self.changelog_distribution = {
            url: {t: list(ps) for t, ps in by_topic.items() if t in changelogs}
            for url, by_topic in actives_by_url.items()
        }
        self.external_topic_distribution = {
            url: {t: list(ps) for t, ps in by_topic.items() if t not in changelogs}
            for url, by_topic in actives_by_url.items()
        }
        self.changelog_urls = _urls_by_partition(self.changelog_distribution)
        self.external_urls = _urls_by_partition(self.external_topic_distribution)

    # -- Faust's PartitionAssignorT --

    def group_for_topic(self, topic: str) -> int:
        """The topic's copartitioned group; KeyError for a topic not in the assignment."""
        return self.topic_groups[topic]

    def assigned_actives(self) -> set[TP]:
        return set(self.active_tps)

    def assigned_standbys(self) -> set[TP]:
        return set(self.standby_tps)

    def is_active(self, tp: TP) -> bool:
        return tp in self.active_tps

    def is_standby(self, tp: TP) -> bool:
        return tp in self.standby_tps

    def key_store(self, topic: str, key: bytes) -> URL:
        """The URL of the worker holding ``key`` (encoded) of the changelog ``topic`` active;
        KeyError if no worker does."""
        return URL(self.changelog_urls[self.app.producer.key_partition(topic, key)])

    def external_key_store(self, topic: str, key: bytes) -> URL:
        """The URL of the worker processing ``key`` (encoded) of the source ``topic``."""
        return URL(self.external_urls[self.app.producer.key_partition(topic, key)])

    def table_metadata(self, topic: str) -> HostToPartitionMap:
        """Worker URL -> the partitions of the changelog ``topic`` it holds active."""
        return {
            url: {t: ps for t, ps in by_topic.items() if t == topic}
            for url, by_topic in self.changelog_distribution.items()
        }

    def tables_metadata(self) -> HostToPartitionMap:
        return self.changelog_distribution

    def external_topics_metadata(self) -> HostToPartitionMap:
        return self.external_topic_distribution


def _tps(by_topic: Mapping[str, Iterable[int]]) -> set[TP]:
    return {TP(topic, p) for topic, partitions in by_topic.items() for p in partitions}


def _urls_by_partition(distribution: HostToPartitionMap) -> dict[TP, str]:
    return {
        TP(topic, p): url
        for url, by_topic in distribution.items()
        for topic, partitions in by_topic.items()
        for p in partitions
    }
