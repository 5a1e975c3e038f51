"""How many records of one partition a round of Faust's fetch loop takes (transport fix 25).

aiokafka's ``fetched_records`` drains each partition's whole fetch into one round, and Faust's
fetch loop hands every record of a round out, at the agents' pace, before it takes any more.
A partition a worker has just gained or got back brings its backlog (the records written while
it moved) as one fetch of several hundred records, and the partitions the worker kept, whose
few new records were fetched meanwhile, wait in aiokafka's buffer until that whole round is
out. In ``bench/rebalance.py`` such rounds of 400 to 1,200 stream records took 0.8 to 2.8 s,
and were every remaining worst stop of a kept partition (docs/rebalance-pauses.md).

Here a round takes at most ``RECORDS_PER_PARTITION_PER_ROUND`` records of each partition,
one partition at a time in aiokafka's order; the rest stay in aiokafka's buffer for the next
round, which follows at once (no fetch request is needed for them). A kept partition's records
then wait for at most one share of each backlog. aiokafka moves a partition's position only
over the records a round took (``FetchResult.getall``), so recovery's end detection (fixes 10
and 17) and the hand-out ledger (fix 5) see what they saw before, one round later.

A fetch error aiokafka holds for a partition is raised by the call that reaches it with nothing
taken yet, as aiokafka does: once records are taken, the error waits for the next round (it
cannot be raised without losing them, and aiokafka deletes it as it raises it).
Delete when Faust hands a round's records out with a bound per partition.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence, Set
from typing import Any

from faust.types import TP

#: Records of one partition a round hands out at most. A batch agent (`streamapp.batches`)
#: still finds what it found before: Faust's fetch loop yields to the agents every 100 records
#: of a round, cut over its partitions. A gained partition's share is about 0.05 to 0.2 s of
#: hand-out at 1 to 4 ms a stream record (``bench/rebalance.py`` on a busy 2-core machine).
RECORDS_PER_PARTITION_PER_ROUND = 50

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
    ``among``, one partition at a time: at most ``per_partition`` of each, counting what
    ``records`` holds of it already, and at most ``most`` in all (None: no bound). Returns how
    many it added."""
    added = 0
    for tp, failed in pending():
        if tp not in among:
            continue
        room = per_partition - len(records.get(tp, ())) if per_partition is not None else None
        if most is not None:
            if added >= most:
                break
            room = most - added if room is None else min(room, most - added)
        if room is not None and room <= 0:
            continue
        if failed and records:
            continue  # raised next round (see the module's docstring)
        taken = await fetch({tp}, 0, room)
        merge(records, taken)
        added += count(taken)
    return added
