"""How many stream records a round of Faust's fetch loop takes (transport fix 25).

aiokafka's ``fetched_records`` drains each partition's whole fetch into one round, and Faust's
fetch loop hands every record of a round out, at the agents' pace, before it takes any more.
A partition a worker has just gained or got back brings its backlog (the records written while
it moved) as one fetch of several hundred records, and the partitions the worker kept, whose
few new records were fetched meanwhile, wait in aiokafka's buffer until that whole round is
out. In ``bench/rebalance.py`` such rounds of 400 to 1,200 stream records took 0.8 to 2.8 s,
and were every remaining worst stop of a kept partition (docs/rebalance-pauses.md). A bound
per partition was not enough: a worker catching up on six partitions at once (a rolling
restart's) took 50 of each, 300 records in 0.4 to 1.8 s.

Here a round takes at most ``RECORDS_PER_PARTITION_PER_ROUND`` records of each stream
partition and ``RECORDS_PER_ROUND`` in all, split evenly over the partitions with records
(what one does not use goes to the others), from the partition after the one the last round
ended at: with more partitions than the bound, each waits its turn, none is left behind for
good. The rest stay in aiokafka's buffer for the next round, which follows at once (no fetch
request is needed for them). A kept partition's records then wait for at most one bounded
round. aiokafka moves a partition's position only over the records a round took
(``FetchResult.getall``), so recovery's end detection (fixes 10 and 17) and the hand-out ledger
(fix 5) see what they saw before, one round later.

A fetch error aiokafka holds for a partition is raised by a round that has taken nothing yet,
before it takes any records, as aiokafka raises the first one it reaches; one fetched once a
round has taken records waits for the next round (it cannot be raised without losing them,
and aiokafka deletes it as it raises it).
Delete when Faust hands a round's records out with a bound per partition and in all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence, Set
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
#: (docs/rebalance-pauses.md, docs/throughput.md).
RECORDS_PER_ROUND = 100

#: The partition each set of topics' last take ended at (by their topics: a round takes its
#: streams' share and its replicas' in two takes): the next take starts after it, so that a
#: bound in all smaller than the partitions with records leaves none of them behind for good.
_last_taken: dict[frozenset[str], TP] = {}

#: ``fetch(partitions, timeout, max_records)``: the records aiokafka has fetched for
#: ``partitions`` (never empty: aiokafka reads an empty set as every partition), waiting up to
#: ``timeout`` seconds for some if there are none.
Fetch = Callable[[Set[TP], float, int | None], Awaitable[Mapping[TP, list[Any]]]]

#: ``pending()``: the partitions aiokafka holds something fetched for and not taken yet, in its
#: order, each with True where that is a fetch error rather than records.
Pending = Callable[[], Sequence[tuple[TP, bool]]]


def count(records: Mapping[TP, list[Any]]) -> int:
    return sum(len(batch) for batch in records.values())


def merge(into: dict[TP, list[Any]], more: Mapping[TP, list[Any]]) -> None:
    """``more`` after ``into``: a partition in both took its later records in ``more``."""
    for tp, batch in more.items():
        if batch:
            into.setdefault(tp, []).extend(batch)


async def take_per_partition(
    fetch: Fetch,
    pending: Pending,
    among: Set[TP],
    records: dict[TP, list[Any]],
    *,
    per_partition: int | None,
    most: int | None,
) -> int:
    """Adds to ``records`` (the round's so far) the records aiokafka holds for the partitions
    ``among``: at most ``per_partition`` of each, counting what ``records`` holds of it already,
    and at most ``most`` in all (None: no bound). A share per partition makes it a stream
    round's take (fix 25), which also takes at most ``RECORDS_PER_ROUND`` of ``among`` in all,
    ``records`` counted. A bound in all is split evenly over the partitions with records, what
    one of them does not use going to the others, starting after the partition the last take
    of the same topics ended at. Returns how many it added."""
    if not records:
        await _raise_held_error(fetch, pending, among, records)
    budget = most
    if per_partition is not None:
        left = RECORDS_PER_ROUND - sum(len(records.get(tp, ())) for tp in among)
        budget = left if budget is None else min(budget, left)
    if budget is not None and budget <= 0:
        return 0
    topics = frozenset(tp.topic for tp in among)
    # Sorted, so that the rotation does not depend on aiokafka's order, which puts a partition
    # at the end each time its buffer is drained and fetched again.
    open_ = sorted(tp for tp, failed in pending() if tp in among and not failed)
    open_ = _starting_after(open_, _last_taken.get(topics))
    added = 0
    while open_ and (budget is None or added < budget):
        may_hold_more: list[TP] = []
        for i, tp in enumerate(open_):
            if (tp, True) in pending():
                # An error fetched since the round began is left for the next one: the fetch
                # of its partition would raise it, and lose the records taken already.
                continue
            room = per_partition - len(records.get(tp, ())) if per_partition is not None else None
            if budget is not None:
                # What is left, evenly over the partitions this pass has not reached yet,
                # rounded up: a budget smaller than their count still takes one of each first.
                share = -(-(budget - added) // (len(open_) - i))
                room = share if room is None else min(room, share)
            if room is not None and room <= 0:
                continue
            fetched = await fetch({tp}, 0, room)
            merge(records, fetched)
            taken = count(fetched)
            added += taken
            if taken:
                _last_taken[topics] = tp
            if room is not None and taken >= room:
                may_hold_more.append(tp)  # a share less than what it holds: another pass
        open_ = may_hold_more
    return added


async def _raise_held_error(
    fetch: Fetch, pending: Pending, among: Set[TP], records: dict[TP, list[Any]]
) -> None:
    """A round that has taken nothing raises the first fetch error aiokafka holds for
    ``among`` before it takes any records (aiokafka drops the error as it raises it)."""
    for tp, failed in pending():
        if failed and tp in among:
            merge(records, await fetch({tp}, 0, 1))  # raises; a record if it was replaced
            return


def _starting_after(partitions: list[TP], last: TP | None) -> list[TP]:
    """``partitions`` (sorted) from the first one after ``last``, round to the ones before."""
    if last is None:
        return partitions
    start = next((i for i, tp in enumerate(partitions) if tp > last), 0)
    return partitions[start:] + partitions[:start]
