"""Partitions as small integers, and previous ownership resolved onto them.

The sticky strategies must stay fast at a million partitions, where tuples and
per-partition objects dominate the running time. A partition of topic number
`t` (in sorted topic order) with number `p` becomes the integer `p * T + t`,
so ascending ids are KIP-615's interleaved order (t0p0, t1p0, ..., t0p1, ...),
which spreads consecutive partition numbers, and with them the load of a
keyed stream, over different members.
"""

from __future__ import annotations

from collections.abc import Iterable

from assignor.model import TopicPartitions
from assignor.strategies.problem import PartitionLists, Problem


class PartitionSpace:
    """The id mapping for the subscribed topics of one problem."""

    def __init__(self, problem: Problem) -> None:
        self.topics: list[str] = problem.subscribed_topics()
        self.counts: list[int] = [problem.topics[t] for t in self.topics]
        self.index: dict[str, int] = {t: i for i, t in enumerate(self.topics)}
        self.width: int = max(len(self.topics), 1)
        self.size: int = max(self.counts, default=0) * self.width
        self.uniform: bool = len(set(self.counts)) <= 1

    def all_ids(self) -> list[int]:
        """Every partition id, ascending."""
        if self.uniform:
            return list(range(self.size))
        width, counts = self.width, self.counts
        return [pid for pid in range(self.size) if pid // width < counts[pid % width]]

    def ids_of_topics(self, topics: Iterable[str]) -> list[int]:
        """Ids of every partition of the given (known) topics, ascending."""
        width = self.width
        ids: list[int] = []
        for topic in topics:
            t = self.index.get(topic)
            if t is not None:
                ids.extend(range(t, self.counts[t] * width, width))
        ids.sort()
        return ids

    def encode(self, owned: TopicPartitions) -> list[int]:
        """Ids of the existing partitions among `owned`; stale ones are dropped."""
        width = self.width
        ids: list[int] = []
        for topic, parts in owned.items():
            t = self.index.get(topic)
            if t is None or not parts:
                continue
            count = self.counts[t]
            # The usual case (nothing stale) skips the per-partition range test.
            if min(parts) >= 0 and max(parts) < count:
                ids.extend([p * width + t for p in parts])
            else:
                ids.extend([p * width + t for p in parts if 0 <= p < count])
        return ids

    def decode(self, ids: Iterable[int]) -> PartitionLists:
        """Topic -> ascending partitions for a collection of ids."""
        width = self.width
        buckets: list[list[int]] = [[] for _ in range(width)]
        for pid in sorted(ids):
            buckets[pid % width].append(pid // width)
        return {self.topics[t]: parts for t, parts in enumerate(buckets) if parts}

    def topic_of(self, pid: int) -> str:
        return self.topics[pid % self.width]


def resolve_claims(problem: Problem, space: PartitionSpace) -> dict[str, list[int]]:
    """Each member's valid previous ownership, as ids.

    A claim counts only for an existing partition of a topic the member still
    subscribes to (KIP-54's first step). When two members claim the same
    partition, the higher generation wins (KIP-54, KIP-315's epochs): a member
    that missed a rebalance still reports what it held before it. Equal
    generations fall to the smaller member id so the answer stays deterministic.
    """
    order = sorted(problem.members, key=lambda m: (-problem.members[m].generation, m))
    claimed: set[int] = set()
    claims: dict[str, list[int]] = {}
    for member_id in order:
        member = problem.members[member_id]
        owned = {t: ps for t, ps in member.owned.items() if t in member.subscription}
        mine = space.encode(owned)
        # Conflicts are rare (the scenario model already resolved them), so
        # test the whole claim at once and filter only when needed.
        if not claimed.isdisjoint(mine):
            mine = [pid for pid in mine if pid not in claimed]
        mine = sorted(set(mine))
        claimed.update(mine)
        claims[member_id] = mine
    return claims
