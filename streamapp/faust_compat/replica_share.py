"""How many changelog records one round of Faust's fetch loop takes (transport fix 24).

Faust's fetch loop takes whatever aiokafka has fetched (``getmany``), hands every record of it
out one at a time, and takes nothing more until the last one is out. A replica that has fallen
behind (a standby assigned afresh, a warmup, a restarted worker's replicas) brings a whole
fetch of changelog records at once, often over a thousand, and each one goes through the
hand-out and table recovery's apply in the same event loop. Measured in ``bench/rebalance.py``:
rounds of 1,600 changelog records took 0.6 to 1.6 s, and the records of the partitions the
worker kept processing sat in aiokafka's buffer meanwhile, fetched but not taken. Those stops
were the "stopped" column's longest (docs/rebalance-pauses.md).

Here a round takes the stream partitions' records first, as many as Faust asks for, and then
at most ``REPLICA_RECORDS_PER_ROUND`` changelog records. The rest stay in aiokafka's buffer for
the next round, which follows at once (no fetch request is needed for them): a replay goes on
at the same pace in smaller rounds, and a stream record waits for at most one round's share
of replica records. aiokafka's position of a changelog partition moves only over the records
a round took, so recovery's view of what has been handed out (fixes 10 and 17) is unchanged.
Delete when Faust reads replicas with a consumer of their own (as Kafka Streams does), or
hands records out with a bound per round.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Set
from typing import Any

from faust.types import TP

#: Changelog records one round of the fetch loop hands out at most. About 50 ms of hand-out
#: and apply on a busy 2-core machine (0.3 to 0.6 ms a record in ``bench/rebalance.py``).
REPLICA_RECORDS_PER_ROUND = 100

#: ``fetch(partitions, timeout, max_records)``: the records aiokafka has fetched for
#: ``partitions`` (never empty: aiokafka reads an empty set as every partition), waiting up to
#: ``timeout`` seconds for some if there are none.
Fetch = Callable[[Set[TP], float, int | None], Awaitable[Mapping[TP, list[Any]]]]


def _count(records: Mapping[TP, list[Any]]) -> int:
    return sum(len(batch) for batch in records.values())


def _merge(into: dict[TP, list[Any]], more: Mapping[TP, list[Any]]) -> None:
    # A partition in both took its later records in the second call: they follow.
    for tp, batch in more.items():
        if batch:
            into.setdefault(tp, []).extend(batch)


async def fetch_streams_first(
    fetch: Fetch,
    partitions: Set[TP],
    replicas: Set[TP],
    timeout: float,
    max_records: int | None,
    replica_share: int = REPLICA_RECORDS_PER_ROUND,
) -> dict[TP, list[Any]]:
    """One round's records of ``partitions``: those of the stream partitions first (up to
    ``max_records``, all when None), then at most ``replica_share`` of the changelog
    partitions ``replicas``. With nothing fetched yet it waits up to ``timeout`` for the next
    fetch response, whichever partitions it brings."""
    # ``partitions`` is Faust's live set of active partitions: a partition paused while a
    # call waits is left out of what that call takes (the streams and replicas below are
    # taken without a wait, so their copies cannot go stale).
    streams = {tp for tp in partitions if tp not in replicas}
    replicas = {tp for tp in replicas if tp in partitions}
    records: dict[TP, list[Any]] = {}
    if streams:
        _merge(records, await fetch(streams, 0, max_records))
    room = replica_share if max_records is None else min(replica_share, max_records)
    room -= _count(records) if max_records is not None else 0
    if replicas and room > 0:
        _merge(records, await fetch(replicas, 0, room))
    if records or not timeout:
        return records
    # Nothing was waiting: the first records to come, capped as a replica's share would be;
    # stream records that came with them are taken too.
    _merge(records, await fetch(partitions, timeout, max(1, room)))
    streams = {tp for tp in partitions if tp not in replicas}
    if streams and records:
        left = None if max_records is None else max_records - _count(records)
        if left is None or left > 0:
            _merge(records, await fetch(streams, 0, left))
    return records
