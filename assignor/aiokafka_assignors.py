"""The classic strategies as aiokafka partition assignors.

Any of them works with a plain consumer::

    sticky = StickyAssignor()
    consumer = AIOKafkaConsumer("clicks", group_id="g", partition_assignment_strategy=(sticky,))

Each assignor is an *instance* (aiokafka's own assignors keep their state on
the class, so two consumers in one process would share what they owned). A
member's JoinGroup metadata carries what it was last assigned and the
generation of that assignment (`strategies.userdata`); the leader turns all
members' metadata into a scenario, validates it with the plan's own scenario
model (`assignor.parse_scenario`: stale claims dropped, conflicting claims
resolved by generation), runs the strategy's core (what `assignor.plan(scenario,
strategy=...)` runs, minus building the full result object, which the leader
does not need), and sends each member its share plus the next generation
(the highest any member reported, plus one: KIP-315's epoch). A member whose
user data cannot be read is logged once with the cause and treated as fresh.

Cooperative-sticky on aiokafka's eager protocol
-----------------------------------------------
aiokafka's group coordinator speaks only the eager protocol: before it rejoins,
every member revokes all its partitions (``on_partitions_revoked``, offsets
committed). ``CooperativeStickyAssignor`` keeps KIP-429's two-step semantics on
top of that:

- What is revoked: every partition whose target owner differs from the member
  that owned it before (and is still in the group) is assigned to *nobody* in
  this generation; the previous owner does not get it back and the new owner
  does not get it yet. Partitions that stay, and partitions whose previous
  owner left, are assigned at once. Under eager the previous owner has already
  stopped consuming the revoked ones, so nobody consumes them twice; they are
  simply idle until the follow-up.
- How the follow-up is triggered: the assignment user data says
  ``followup: true``; every member bound to its consumer with
  `CooperativeStickyAssignor.bind` asks its group coordinator to rejoin
  (``request_rejoin()``, the call aiokafka itself uses when a commit meets a
  rebalance; aiokafka has no public one) right after receiving it. In the next
  generation the revoked partitions are owned by nobody and go straight to
  their target owners; nothing else moves, so it converges after one follow-up.
- Members that are not bound cannot start that follow-up, and revoked
  partitions would then stay idle until some unrelated rebalance. So members
  say in their metadata whether they are bound, and when none is, the leader
  plans with plain ``sticky`` instead (nothing revoked, no follow-up) and
  logs why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from assignor.scenario_parser import parse_scenario
from assignor.strategies import CORES, Outcome, problem_from_scenario
from assignor.strategies.userdata import (
    AssignmentData,
    SubscriptionData,
    UserDataError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

__all__ = [
    "CooperativeStickyAssignor",
    "FairAssignor",
    "JoinStickyAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "StrategyAssignor",
]

log = logging.getLogger(__name__)

#: Protocol names are prefixed: the user data differs from Kafka's own
#: "range"/"sticky" assignors, and members must never mix the two.
PROTOCOL_PREFIX = "streamapp-"


# aiokafka ships no type information, so its base class is `Any` to mypy.
class StrategyAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """An aiokafka assignor running one classic `assignor.plan` strategy."""

    version = 0
    strategy = "sticky"

    def __init__(self, strategy: str | None = None) -> None:
        if strategy is not None:
            self.strategy = strategy
        if self.strategy not in CORES:
            known = ", ".join(sorted(CORES))
            raise ValueError(f"unknown strategy {self.strategy!r}; known: {known}")
        self._owned: dict[str, list[int]] = {}
        self._generation = -1
        self._rejoin: Callable[[], None] | None = None
        #: the last decision this instance made as leader (for tests and logs)
        self.last_outcome: Outcome | None = None
        #: the last assignment user data this member received
        self.last_assignment: AssignmentData = AssignmentData()

    @property
    def name(self) -> str:
        return PROTOCOL_PREFIX + self.strategy

    def on_followup(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever an assignment asks for a follow-up rebalance.

        It runs inside aiokafka's join handling, right after the new assignment
        is stored; it should only *request* a rebalance, not wait for one.
        """
        self._rejoin = callback

    def bind(self, consumer: Any) -> None:
        """Let this member start follow-up rebalances on `consumer` (an AIOKafkaConsumer).

        aiokafka has no public "rebalance now" call; the group coordinator's
        ``request_rejoin()`` is what aiokafka itself uses when a commit meets a
        rebalance. The coordinator is looked up when needed: the consumer
        creates it in ``start()``.
        """

        def rejoin() -> None:
            coordinator = getattr(consumer, "_coordinator", None)
            request = getattr(coordinator, "request_rejoin", None)
            if request is None:
                log.warning(
                    "%s: cannot request a follow-up rebalance: no group coordinator", self.name
                )
                return
            request()

        self.on_followup(rejoin)

    # aiokafka declares these as classmethods; instance methods satisfy the same
    # call sites (the coordinator calls them on the object it was given) and
    # keep each consumer's state its own.
    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        data = SubscriptionData(
            generation=self._generation,
            owned=self._owned,
            can_rejoin=self._rejoin is not None,
        )
        return ConsumerProtocolMemberMetadata(
            self.version, sorted(topics), encode_subscription(data)
        )

    def assign(
        self,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        scenario, generation, can_rejoin = self._scenario(cluster, members)
        strategy = self.strategy
        if strategy == "cooperative-sticky" and not can_rejoin:
            log.warning(
                "cooperative-sticky: no member of the group can start a follow-up rebalance "
                "(none is bound with CooperativeStickyAssignor.bind); planning with 'sticky' "
                "so that no partition is revoked"
            )
            strategy = "sticky"
        outcome = CORES[strategy](problem_from_scenario(parse_scenario(scenario)))
        self.last_outcome = outcome
        user_data = encode_assignment(
            AssignmentData(generation=generation, followup=outcome.followup_rebalance)
        )
        return {
            member_id: ConsumerProtocolMemberAssignment(
                self.version,
                sorted(outcome.assignment.get(member_id, {}).items()),
                user_data,
            )
            for member_id in members
        }

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        owned: dict[str, list[int]] = {}
        for topic, partitions in assignment.assignment:
            owned.setdefault(topic, []).extend(partitions)
        self._owned = owned
        try:
            data = decode_assignment(assignment.user_data or b"")
        except UserDataError as exc:
            log.warning("%s: ignoring the leader's assignment user data: %s", self.name, exc)
            data = AssignmentData()
        self.last_assignment = data
        self._generation = data.generation
        if data.followup and self._rejoin is not None:
            self._rejoin()

    def _scenario(
        self,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> tuple[dict[str, Any], int, bool]:
        """The leader's scenario, the next generation, and whether any member can rejoin."""
        topics: dict[str, int] = {}
        scenario_members: dict[str, Any] = {}
        generation = -1
        can_rejoin = False
        for member_id, metadata in members.items():
            try:
                data = decode_subscription(metadata.user_data or b"")
            except UserDataError as exc:
                log.warning(
                    "%s: member %s sent unreadable user data (%s); treating it as fresh",
                    self.name,
                    member_id,
                    exc,
                )
                data = SubscriptionData()
            generation = max(generation, data.generation)
            can_rejoin = can_rejoin or data.can_rejoin
            for topic in metadata.subscription:
                if topic not in topics:
                    partitions = cluster.partitions_for_topic(topic)
                    if partitions:
                        topics[topic] = len(partitions)
            scenario_members[member_id] = {
                "subscription": list(metadata.subscription),
                "generation": data.generation,
                "owned_active": data.owned,
            }
        return {"topics": topics, "members": scenario_members}, generation + 1, can_rejoin


class RangeAssignor(StrategyAssignor):
    """Kafka's range assignor semantics."""

    strategy = "range"


class RoundRobinAssignor(StrategyAssignor):
    """Kafka's round-robin assignor semantics."""

    strategy = "roundrobin"


class FairAssignor(StrategyAssignor):
    """KIP-49: least-loaded eligible member, most constrained topics first."""

    strategy = "fair"


class StickyAssignor(StrategyAssignor):
    """KIP-54: balanced first, then as sticky as possible."""

    strategy = "sticky"


class CooperativeStickyAssignor(StrategyAssignor):
    """KIP-429 semantics on aiokafka's eager protocol (see the module docs)."""

    strategy = "cooperative-sticky"


class JoinStickyAssignor(StrategyAssignor):
    """KIP-315: partition p of every subscribed topic to one member, sticky, with epochs."""

    strategy = "join-sticky"
