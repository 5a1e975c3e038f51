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
    Fetch,
    Pending,
    count,
    merge,
    take_per_partition,
)

#: Changelog records one round of the fetch loop hands out at most. About 50 ms of hand-out
#: and apply on a busy 2-core machine (0.3 to 0.6 ms a record in ``bench/rebalance.py``).
REPLICA_RECORDS_PER_ROUND = 100


async def fetch_streams_first(
    fetch: Fetch,
    pending: Pending,
    partitions: Set[TP],
    replicas: Set[TP],
    timeout: float,
    max_records: int | None,
    replica_share: int = REPLICA_RECORDS_PER_ROUND,
    per_partition: int = RECORDS_PER_PARTITION_PER_ROUND,
) -> dict[TP, list[Any]]:
    """One round's records of ``partitions``: those of the stream partitions first (at most
    ``per_partition`` of each, ``max_records`` in all, no bound in all when None), then at most
    ``replica_share`` of the changelog partitions ``replicas``. ``pending`` says which
    partitions aiokafka holds records for. With nothing fetched yet it waits up to ``timeout``
    for the next fetch response, whichever partitions it brings."""
    records: dict[TP, list[Any]] = {}
    await _take(
        fetch, pending, partitions, replicas, records, max_records, replica_share, per_partition
    )
    if records or not timeout:
        return records
    # Nothing was waiting: the first record to come, then the round as above (the response
    # that brought it may hold records of several partitions).
    merge(records, await fetch(partitions, timeout, 1))
    if records:
        await _take(
            fetch, pending, partitions, replicas, records, max_records, replica_share, per_partition
        )
    return records


async def _take(
    fetch: Fetch,
    pending: Pending,
    partitions: Set[TP],
    replicas: Set[TP],
    records: dict[TP, list[Any]],
    max_records: int | None,
    replica_share: int,
    per_partition: int,
) -> None:
    # ``partitions`` is Faust's live set of active partitions: a partition paused while a
    # call waits is left out of what that call takes (the streams and replicas below are
    # taken without a wait, so their copies cannot go stale).
    streams = {tp for tp in partitions if tp not in replicas}
    replicas = {tp for tp in replicas if tp in partitions}
    if streams:
        left = None if max_records is None else max_records - count(records)
        if left is None or left > 0:
            await take_per_partition(
                fetch, pending, streams, records, per_partition=per_partition, most=left
            )
    room = replica_share - sum(len(batch) for tp, batch in records.items() if tp in replicas)
    if max_records is not None:
        room = min(room, max_records - count(records))
    if replicas and room > 0:
        await take_per_partition(fetch, pending, replicas, records, per_partition=None, most=room)
