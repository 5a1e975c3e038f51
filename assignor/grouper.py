"""The PartitionGrouper: which topics move together, and who may take them.

`PartitionGrouper().group(scenario) -> Grouping` (or `group_partitions`)
applies docs/assignment-rules.md's grouping rules:

1. declared co-partition groups merge transitively (their partition counts
   were checked by `parse_scenario`);
2. topics with the same partition count and exactly the same set of
   subscribing members are co-partitioned too (Faust's rule), and groups that
   share a topic merge, so a changelog lands with its table's sources;
3. topics nobody subscribes to belong to no group (`Grouping.unassigned_topics`).

A *task* is ``(group.index, partition)``: partition ``p`` of every topic in the
group goes to one member. A group's ``eligible`` members are those subscribed
to all of its topics; a group holding a changelog topic is ``stateful``.
Groups are ordered by their sorted topic names, so indexes are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from assignor.model import Scenario
from assignor.union_find import UnionFind

__all__ = ["Group", "Grouping", "PartitionGrouper", "group_partitions"]


@dataclass(frozen=True)
class Group:
    """Co-partitioned topics: partition p of each goes to the same member."""

    index: int
    topics: tuple[str, ...]
    partitions: int
    changelog_topics: tuple[str, ...]
    eligible: tuple[str, ...]

    @property
    def stateful(self) -> bool:
        return bool(self.changelog_topics)


@dataclass(frozen=True)
class Grouping:
    """All groups of a scenario, plus the topics no member can take."""

    groups: tuple[Group, ...]
    unassigned_topics: tuple[str, ...]
    group_of_topic: dict[str, int] = field(hash=False)

    def task_count(self) -> int:
        return sum(group.partitions for group in self.groups)


class PartitionGrouper:
    """Groups a scenario's topics into co-partitioned groups (see module docs)."""

    def group(self, scenario: Scenario) -> Grouping:
        subscribers: dict[str, set[str]] = {}
        for member in scenario.members.values():
            for topic in member.subscription:
                subscribers.setdefault(topic, set()).add(member.member_id)
        subscribed = sorted(subscribers)

        sets = UnionFind()
        for topic in subscribed:
            sets.find(topic)
        for declared in scenario.copartitioned:
            live = [t for t in declared if t in subscribers]
            for other in live[1:]:
                sets.union(live[0], other)
        by_faust_rule: dict[tuple[int, frozenset[str]], str] = {}
        for topic in subscribed:
            key = (scenario.topics[topic], frozenset(subscribers[topic]))
            first = by_faust_rule.setdefault(key, topic)
            sets.union(first, topic)

        ordered = sorted(tuple(sorted(topics)) for topics in sets.sets().values())

        groups: list[Group] = []
        group_of_topic: dict[str, int] = {}
        for index, topics in enumerate(ordered):
            eligible = set.intersection(*(subscribers[t] for t in topics))
            groups.append(
                Group(
                    index=index,
                    topics=topics,
                    partitions=scenario.topics[topics[0]],
                    changelog_topics=tuple(t for t in topics if t in scenario.changelog_topics),
                    eligible=tuple(m for m in scenario.members if m in eligible),
                )
            )
            for topic in topics:
                group_of_topic[topic] = index
        unassigned = tuple(t for t in scenario.topics if t not in subscribers)
        return Grouping(
            groups=tuple(groups), unassigned_topics=unassigned, group_of_topic=group_of_topic
        )


def group_partitions(scenario: Scenario) -> Grouping:
    """Shorthand for ``PartitionGrouper().group(scenario)``."""
    return PartitionGrouper().group(scenario)
