"""KIP-54's sticky assignment for uneven subscriptions (the general path).

Partitions fall into *classes*: all partitions of topics with exactly the same
subscribers. A partition can only move within its class, so balance is a
per-class question, which keeps every step cheap:

1. keep every valid previous claim;
2. give each free partition to its least-loaded eligible member, the most
   constrained classes (fewest subscribers) first;
3. while some class has a holder with at least two more partitions than
   another member of that class, move one of its partitions there, preferring
   one it did not own before (so stickiness only yields to balance).

Each move in step 3 lowers the sum of squared loads by at least two, so the
loop ends, and it ends exactly when KIP-54's balance definition holds: no
partition can move to an eligible member holding two or more fewer. Because
moves only ever improve balance, KIP-54's step 5 (reverting moves that did not
improve the balance score) is never needed.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from assignor.strategies.space import PartitionSpace


class _Class:
    """The partitions of topics sharing one subscriber set."""

    def __init__(self, members: list[str]) -> None:
        self.members = members
        # Per holder: partitions it did not own before, and ones it did; moves
        # take from the first list before the second.
        self.fresh: dict[str, list[int]] = {m: [] for m in members}
        self.sticky: dict[str, list[int]] = {m: [] for m in members}

    def held(self, member_id: str) -> int:
        return len(self.fresh[member_id]) + len(self.sticky[member_id])

    def take_one(self, member_id: str) -> int:
        fresh = self.fresh[member_id]
        return fresh.pop() if fresh else self.sticky[member_id].pop()


def general_assign(
    space: PartitionSpace,
    subscriptions: Mapping[str, frozenset[str]],
    claims: Mapping[str, Sequence[int]],
) -> dict[str, list[int]]:
    """Balanced-then-sticky assignment of every subscribed partition, as ids."""
    load = dict.fromkeys(subscriptions, 0)
    class_of_topic: dict[int, _Class] = {}
    for key, topic_indexes in _topics_by_key(space, subscriptions).items():
        cls = _Class(list(key))
        for t in topic_indexes:
            class_of_topic[t] = cls

    taken = bytearray(space.size)
    for member_id, owned in claims.items():
        for pid in owned:
            cls = class_of_topic[pid % space.width]
            cls.sticky[member_id].append(pid)
            taken[pid] = 1
        load[member_id] += len(owned)

    unique = {id(c): c for c in class_of_topic.values()}
    ordered = sorted(unique.values(), key=lambda c: (len(c.members), c.members))
    _fill_free(space, ordered, class_of_topic, taken, load)
    _balance(ordered, load)

    result: dict[str, list[int]] = {m: [] for m in subscriptions}
    for cls in ordered:
        for member_id in cls.members:
            result[member_id].extend(cls.sticky[member_id])
            result[member_id].extend(cls.fresh[member_id])
    for owned in result.values():
        owned.sort()
    return result


def _topics_by_key(
    space: PartitionSpace, subscriptions: Mapping[str, frozenset[str]]
) -> dict[tuple[str, ...], list[int]]:
    by_key: dict[tuple[str, ...], list[int]] = {}
    for t, topic in enumerate(space.topics):
        key = tuple(sorted(m for m, subs in subscriptions.items() if topic in subs))
        by_key.setdefault(key, []).append(t)
    return by_key


def _fill_free(
    space: PartitionSpace,
    ordered: list[_Class],
    class_of_topic: Mapping[int, _Class],
    taken: bytearray,
    load: dict[str, int],
) -> None:
    """Step 2: free partitions to the least-loaded eligible member."""
    width = space.width
    free_by_class: dict[int, list[int]] = {id(c): [] for c in ordered}
    for t, count in enumerate(space.counts):
        bucket = free_by_class[id(class_of_topic[t])]
        bucket.extend(pid for pid in range(t, count * width, width) if not taken[pid])
    for cls in ordered:
        free = sorted(free_by_class[id(cls)])
        if not free:
            continue
        # Only this class's assignments change its members' loads while it is
        # being filled, so one heap built now stays exact.
        heap = [(load[m], m) for m in cls.members]
        heapq.heapify(heap)
        for pid in free:
            count, member_id = heapq.heappop(heap)
            cls.fresh[member_id].append(pid)
            load[member_id] = count + 1
            heapq.heappush(heap, (count + 1, member_id))


def _balance(ordered: list[_Class], load: dict[str, int]) -> None:
    """Step 3: move partitions within classes until KIP-54's balance holds."""
    moved = True
    while moved:
        moved = False
        for cls in ordered:
            if len(cls.members) > 1 and _balance_class(cls, load):
                moved = True


def _balance_class(cls: _Class, load: dict[str, int]) -> bool:
    """Even out one class; True if anything moved.

    Heaps are rebuilt per call because moves in other classes change loads;
    within the call every changed load is pushed again and stale entries are
    skipped when popped.
    """
    low = [(load[m], m) for m in cls.members]
    high = [(-load[m], m) for m in cls.members if cls.held(m)]
    heapq.heapify(low)
    heapq.heapify(high)
    moved = False
    while low and high:
        low_load, receiver = low[0]
        if low_load != load[receiver]:
            heapq.heappop(low)
            continue
        neg_high, giver = high[0]
        if -neg_high != load[giver] or not cls.held(giver):
            heapq.heappop(high)
            continue
        if load[giver] - load[receiver] < 2:
            break
        pid = cls.take_one(giver)
        cls.fresh[receiver].append(pid)
        load[giver] -= 1
        load[receiver] += 1
        moved = True
        heapq.heappop(low)
        heapq.heappop(high)
        heapq.heappush(low, (load[receiver], receiver))
        heapq.heappush(low, (load[giver], giver))
        heapq.heappush(high, (-load[receiver], receiver))
        if cls.held(giver):
            heapq.heappush(high, (-load[giver], giver))
    return moved
