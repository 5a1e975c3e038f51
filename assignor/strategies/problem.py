"""The plain-data problem every classic strategy solves, and what it answers.

The strategy cores work on this small model rather than on the full scenario so
that each one stays a short, pure function that tests and benchmarks can drive
directly; `assignor.strategies.problem_from_scenario` translates the scenario
model into it, and `assignor.result.build_result` the answer into the plan
result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from assignor.model import TopicPartitions

#: topic -> ascending partition numbers, as a strategy builds them
PartitionLists = dict[str, list[int]]


@dataclass(frozen=True)
class Subscription:
    """One group member as the classic strategies see it: Kafka's
    ``ConsumerPartitionAssignor.Subscription`` (topics, generation, owned partitions)."""

    subscription: frozenset[str]
    generation: int = -1
    owned: TopicPartitions = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    """Topics with their partition counts and the members of the group."""

    topics: Mapping[str, int]
    members: Mapping[str, Subscription]

    def subscribed_topics(self) -> list[str]:
        """Existing topics at least one member subscribes to, sorted."""
        wanted: set[str] = set()
        for member in self.members.values():
            wanted.update(member.subscription)
        return sorted(t for t in wanted if t in self.topics)

    def subscribers(self, topic: str) -> list[str]:
        """Members subscribed to `topic`, sorted by member id."""
        return sorted(m for m, member in self.members.items() if topic in member.subscription)

    def all_subscribe_alike(self) -> bool:
        """True when every member subscribes to the same existing topics."""
        known = self.topics.keys()
        subscriptions = {frozenset(m.subscription & known) for m in self.members.values()}
        return len(subscriptions) <= 1


@dataclass
class Outcome:
    """A strategy's answer: who consumes what, and what waits for a follow-up."""

    assignment: dict[str, PartitionLists]
    revoking: dict[str, PartitionLists] = field(default_factory=dict)
    followup_rebalance: bool = False
    # Partitions left to nobody on purpose although someone subscribes
    # (join-sticky leaves partitions beyond the smallest topic's count).
    left_unassigned: PartitionLists = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)


def empty_assignment(problem: Problem) -> dict[str, PartitionLists]:
    """Every member present, owning nothing yet."""
    return {member_id: {} for member_id in problem.members}


def sort_assignment(assignment: dict[str, PartitionLists]) -> dict[str, PartitionLists]:
    """Partition lists ascending, empty topics dropped, members and topics in key order."""
    return {
        member_id: {topic: sorted(parts) for topic, parts in sorted(topics.items()) if parts}
        for member_id, topics in sorted(assignment.items())
    }
