"""The state a worker reports for its replicas as it joins: what recovery applied, not only what
their stores hold yet.

A worker reports, for every changelog partition it has a store of, the next offset that store
needs (`tables.inventory`, read from disk), and the leader places tasks by it: a member within
``acceptable_recovery_lag`` of a changelog's end can take the task without a replay. Faust
writes the records a standby or warmup takes to its store in batches of the table's
``standby_buffer_size`` (1000 by default, across the table's partitions), so a replica that
had taken every record could report up to 999 fewer. The leader then found no member caught up
on a leaving worker's tasks, placed them for balance on members without their state, and those
replayed the partitions in full before processing them: 822 records in one rolling-restart
step of ``bench/rebalance.py`` (5,000 keys, 12 partitions), whose standbys had every record.

What recovery took is written to the store before any replica is promoted: at a revocation
(eager) and as an incremental rebalance begins (`streamapp.runtime.rebalance`). So the
join reports the later of the two per replica.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from faust.types import TP


def applied_next(standby_offsets: Mapping[TP, int | None], replicas: Iterable[TP]) -> dict[TP, int]:
    """Replica partition -> the next offset recovery has to apply (the last one it took, plus
    one); partitions it took nothing of are left out."""
    applied: dict[TP, int] = {}
    for tp in replicas:
        offset = standby_offsets.get(tp)
        if offset is not None and offset >= 0:
            applied[tp] = offset + 1
    return applied


def with_applied(
    on_disk: Mapping[str, Mapping[int, int]], applied: Mapping[TP, int]
) -> dict[str, dict[int, int]]:
    """``on_disk`` (changelog topic -> partition -> next offset its store needs), each replica's
    raised to what recovery applied where that is further; replicas with no store yet added."""
    merged = {topic: dict(partitions) for topic, partitions in on_disk.items()}
    for tp, nxt in applied.items():
        by_partition = merged.setdefault(tp.topic, {})
        by_partition[tp.partition] = max(nxt, by_partition.get(tp.partition, 0))
    return merged
