"""How many changelog records one round of Faust's fetch loop takes (transport fix 24).

Faust's fetch loop takes whatever aiokafka has fetched (``getmany``), hands every record of it
out one at a time, and takes nothing more until the last one is out. A replica that has fallen
behind (a standby assigned afresh, a warmup, a restarted worker's replicas) brings a whole
fetch of changelog records at once, often over a thousand, and each one goes through the
hand-out and table recovery's apply in the same event loop. Measured in ``bench/rebalance.py``:
rounds of 1,600 changelog records took 0.6 to 1.6 s, and the records of the partitions the
worker kept processing sat in aiokafka's buffer meanwhile, fetched but not taken. Those stops
were the "stopped" column's longest (docs/performance.md).

Here a round takes the stream partitions' records first, as many as Faust asks for, and then
at most ``REPLICA_RECORDS_PER_ROUND`` changelog records. The rest stay in aiokafka's buffer for
the next round, which follows at once (no fetch request is needed for them): a replay goes on
at the same pace in smaller rounds, and a stream record waits for at most one round's share
of replica records. aiokafka's position of a changelog partition moves only over the records
a round took, so recovery's view of what has been handed out (fixes 10 and 17) is unchanged.
Each stream partition gives a round at most its own share too (transport fix 25,
`streamapp.faust_compat.partition_share`), and the round walks aiokafka's buffer one partition
at a time for both.
Delete when Faust reads replicas with a consumer of their own (as Kafka Streams does), or
hands records out with a bound per round.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

from faust.types import TP

from streamapp.faust_compat.partition_share import (
    RECORDS_PER_PARTITION_PER_ROUND,
    RECORDS_PER_ROUND,
    Round,
    count,
    merge,
    take_per_partition,
)

#: Changelog records one round of the fetch loop hands out at most. About 50 ms of hand-out
#: and apply on a busy 2-core machine (0.3 to 0.6 ms a record in ``bench/rebalance.py``).
REPLICA_RECORDS_PER_ROUND = 100


async def fetch_streams_first(
    round_: Round, partitions: Set[TP], replicas: Set[TP], timeout: float, max_records: int | None
) -> dict[TP, list[Any]]:
    """One round's records of ``partitions``: those of the stream partitions first, then those
    of the changelog partitions ``replicas``, within the bounds `_take` sets (``max_records``,
    Faust's, bounds the round in all; None: no bound of Faust's). With nothing fetched yet it
    waits up to ``timeout`` for the next fetch response, whichever partitions it brings."""
    await _take(round_, partitions, replicas, max_records)
    if round_.records or not timeout:
        return round_.records
    # Nothing was waiting: the first record to come, then the round as above (the response
    # that brought it may hold records of several partitions).
    merge(round_.records, await round_.fetch(partitions, timeout, 1))
    if round_.records:
        await _take(round_, partitions, replicas, max_records)
    return round_.records


async def _take(
    round_: Round, partitions: Set[TP], replicas: Set[TP], max_records: int | None
) -> None:
    """The round's bounds: stream records first, at most ``RECORDS_PER_PARTITION_PER_ROUND``
    of each partition and ``RECORDS_PER_ROUND`` in all (fix 25), then at most
    ``REPLICA_RECORDS_PER_ROUND`` changelog records (fix 24); ``max_records`` over both. Each
    counts what the round took already (a round that waited takes twice)."""
    # ``partitions`` is Faust's live set of active partitions: a partition paused while a
    # call waits is left out of what that call takes (the streams and replicas below are
    # taken without a wait, so their copies cannot go stale).
    streams = {tp for tp in partitions if tp not in replicas}
    replicas = {tp for tp in replicas if tp in partitions}
    left = None if max_records is None else max_records - count(round_.records)
    if streams and (left is None or left > 0):
        most = RECORDS_PER_ROUND - round_.taken(streams)
        await take_per_partition(
            round_,
            streams,
            per_partition=RECORDS_PER_PARTITION_PER_ROUND,
            most=most if left is None else min(most, left),
        )
    room = REPLICA_RECORDS_PER_ROUND - round_.taken(replicas)
    if max_records is not None:
        room = min(room, max_records - count(round_.records))
    if replicas and room > 0:
        await take_per_partition(round_, replicas, per_partition=None, most=room)
