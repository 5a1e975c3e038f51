"""How many stream records a round of Faust's fetch loop takes (transport fix 25).

aiokafka's ``fetched_records`` drains each partition's whole fetch into one round, and Faust's
fetch loop hands every record of a round out, at the agents' pace, before it takes any more.
A partition a worker has just gained or got back brings its backlog (the records written while
it moved) as one fetch of several hundred records, and the partitions the worker kept, whose
few new records were fetched meanwhile, wait in aiokafka's buffer until that whole round is
out. In ``bench/rebalance.py`` such rounds of 400 to 1,200 stream records took 0.8 to 2.8 s,
and were every remaining worst stop of a kept partition (docs/performance.md). A bound
per partition was not enough: a worker catching up on six partitions at once (a rolling
restart's) took 50 of each, 300 records in 0.4 to 1.8 s.

Here a round takes at most ``RECORDS_PER_PARTITION_PER_ROUND`` records of each stream
partition and ``RECORDS_PER_ROUND`` in all, split evenly over the partitions with records
(what one does not use goes to the others), from the partition after the one the consumer's
last round ended at (`Rotation`): with more partitions than the bound, each waits its turn,
none is left behind for good. The rest stay in aiokafka's buffer for the next round, which
follows at once (no fetch request is needed for them). A kept partition's records then wait
for at most one bounded round. aiokafka moves a partition's position only over the records a
round took (``FetchResult.getall``), so recovery's end detection (fixes 10 and 17) and the
hand-out ledger (fix 5) see what they saw before, one round later.

A fetch error aiokafka holds for a partition is raised by a round that has taken nothing yet,
before it takes any records, as aiokafka raises the first one it reaches; one fetched once a
round has taken records waits for the next round (it cannot be raised without losing them,
and aiokafka deletes it as it raises it).
Delete when Faust hands a round's records out with a bound per partition and in all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from faust.types import TP

#: Records of one partition a round hands out at most: what bounds a round with a single
#: backlog (a gained partition's), about 0.05 to 0.2 s of hand-out at 1 to 4 ms a stream
#: record (``bench/rebalance.py`` on a busy 2-core machine).
RECORDS_PER_PARTITION_PER_ROUND = 50

#: Stream records a round hands out at most, over all its partitions, split evenly over those
#: with records. The hand-out of a round holds every partition's next records back, the kept
#: ones' included: a worker catching up on several partitions at once (the events written
#: while a rolling restart's worker was away) made rounds of 50 records of each of six
#: partitions, 0.4 to 1.8 s at 1.4 to 5.7 ms a record (``bench/rebalance.py``, load 15 to 19).
#: The trade: a batch agent (`streamapp.batches`) gets a round's records at most per batch, and
#: more rounds cost more. At 100 the rolling restart's worst stops went from 1.0 to 2.0 s to
#: 0.6 to 1.0 s and the batch agent took 5 to 8% more CPU a record at_least_once
#: (docs/performance.md).
RECORDS_PER_ROUND = 100

#: ``fetch(partitions, timeout, max_records)``: the records aiokafka has fetched for
#: ``partitions`` (never empty: aiokafka reads an empty set as every partition), waiting up to
#: ``timeout`` seconds for some if there are none.
Fetch = Callable[[Set[TP], float, int | None], Awaitable[Mapping[TP, list[Any]]]]

#: ``pending()``: the partitions aiokafka holds something fetched for and not taken yet, in its
#: order, each with True where that is a fetch error rather than records.
Pending = Callable[[], Sequence[tuple[TP, bool]]]

#: ``failed(tp)``: whether aiokafka holds a fetch error for ``tp`` now. Asked before each fetch
#: of a partition, so it must not walk the whole buffer as ``pending`` does.
Failed = Callable[[TP], bool]


class Rotation:
    """Where one consumer's takes of each set of topics last ended (by their topics: a round
    takes its streams' share and its replicas' in two takes). The next take of the same topics
    starts after it, so that a bound in all smaller than the partitions with records leaves
    none of them behind for good. Each consumer owns one: two consumers in a process (two apps,
    or a test's) each go round their own partitions."""

    def __init__(self) -> None:
        self._ended_at: dict[frozenset[str], TP] = {}

    def order(self, topics: frozenset[str], partitions: Iterable[TP]) -> list[TP]:
        """``partitions`` sorted, from the first one after where the last take of ``topics``
        ended, round to the ones before. Sorted, so that the rotation does not depend on
        aiokafka's order, which puts a partition at the end each time its buffer is drained
        and fetched again."""
        ordered = sorted(partitions)
        last = self._ended_at.get(topics)
        if last is None:
            return ordered
        start = next((i for i, tp in enumerate(ordered) if tp > last), 0)
        return ordered[start:] + ordered[:start]

    def took(self, topics: frozenset[str], tp: TP) -> None:
        self._ended_at[topics] = tp


@dataclass
class Round:
    """One round of a consumer's fetch loop: how it reads aiokafka's buffer, its consumer's
    rotation (kept from round to round), and the records it has taken so far."""

    fetch: Fetch
    pending: Pending
    failed: Failed
    rotation: Rotation
    records: dict[TP, list[Any]] = field(default_factory=dict)

    def taken(self, among: Set[TP]) -> int:
        """Records of the partitions ``among`` the round holds."""
        return sum(len(batch) for tp, batch in self.records.items() if tp in among)


def count(records: Mapping[TP, list[Any]]) -> int:
    return sum(len(batch) for batch in records.values())


def merge(into: dict[TP, list[Any]], more: Mapping[TP, list[Any]]) -> None:
    """``more`` after ``into``: a partition in both took its later records in ``more``."""
    for tp, batch in more.items():
        if batch:
            into.setdefault(tp, []).extend(batch)


async def take_per_partition(
    round_: Round, among: Set[TP], *, per_partition: int | None, most: int | None
) -> int:
    """Adds to the round's records those aiokafka holds for the partitions ``among``: at most
    ``per_partition`` of each, counting what the round holds of it already, and at most
    ``most`` in all (None: no bound). The caller sets both: a stream take's ``most`` counts
    ``RECORDS_PER_ROUND`` (`streamapp.faust_compat.replica_share`). A bound in all is split
    evenly over the partitions with records, what one of them does not use going to the others,
    starting after the partition the consumer's last take of the same topics ended at. Returns
    how many it added."""
    records = round_.records
    if not records:
        await _raise_held_error(round_, among)
    if most is not None and most <= 0:
        return 0
    topics = frozenset(tp.topic for tp in among)
    open_ = round_.rotation.order(
        topics, (tp for tp, failed in round_.pending() if tp in among and not failed)
    )
    added = 0
    while open_ and (most is None or added < most):
        may_hold_more: list[TP] = []
        for i, tp in enumerate(open_):
            if round_.failed(tp):
                # An error fetched since the round began is left for the next one: the fetch
                # of its partition would raise it, and lose the records taken already.
                continue
            room = per_partition - len(records.get(tp, ())) if per_partition is not None else None
            if most is not None:
                # What is left, evenly over the partitions this pass has not reached yet,
                # rounded up: a bound smaller than their count still takes one of each first.
                share = -(-(most - added) // (len(open_) - i))
                room = share if room is None else min(room, share)
            if room is not None and room <= 0:
                continue
            fetched = await round_.fetch({tp}, 0, room)
            merge(records, fetched)
            taken = count(fetched)
            added += taken
            if taken:
                round_.rotation.took(topics, tp)
            if room is not None and taken >= room:
                may_hold_more.append(tp)  # a share less than what it holds: another pass
        open_ = may_hold_more
    return added


async def _raise_held_error(round_: Round, among: Set[TP]) -> None:
    """A round that has taken nothing raises the first fetch error aiokafka holds for
    ``among`` before it takes any records (aiokafka drops the error as it raises it)."""
    for tp, failed in round_.pending():
        if failed and tp in among:
            # Raises; a record if the error was replaced meanwhile.
            merge(round_.records, await round_.fetch({tp}, 0, 1))
            return
