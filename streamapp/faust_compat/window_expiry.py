"""Faust's windowed tables expire their windows after a recovery too (faust-streaming/faust #385).

A Faust windowed table (``app.Table(...).tumbling(..., expires=...)``) finds the windows to
expire in a heap kept in memory (``Collection._partition_timestamps`` and
``._partition_timestamp_keys``), filled by ``_maybe_set_key_ttl`` when the worker writes a
window. Windows that come back from RocksDB or the changelog were never written by this
process, so they are never in the heap and never expire: tests/integration/test_windows.py
shows it on a ``streamapp.App`` with a real broker (stop a worker, restart it, and its
recovered windows stay for good while the ones it writes after the restart expire).

Here, once a recovery has completed, the heap of each of the table's active partitions is
rebuilt from what its RocksDB store holds: the heap then says exactly what the store has, as
it would had this process written it all. Standby partitions are left alone: the active's
expiry deletes reach them through the changelog. Partitions no longer active are dropped from
the heap, so a cleanup never deletes what this worker does not hold any more.

Only streamapp's RocksDB store (the default, `streamapp.runtime.stores`) is rebuilt: it keeps
each partition in its own database, so a key's partition is known. (streamapp's own windowed
aggregates, `streamapp.aggregates`, keep their expiry index in the table and need none of this.)

Faust private names this module uses, checked at import with the others
(`streamapp.faust_compat.PRIVATE_NAMES`):

- ``faust.tables.base.Collection._should_expire_keys``, ``._maybe_set_key_ttl``,
  ``._partition_timestamps``, ``._partition_timestamp_keys``, ``._partition_latest_timestamp``
  and ``._to_key``: the heap, Faust's own way of filling it, and of turning a stored key
  (JSON lists) back into the ``(key, (start, end))`` tuples it holds.

The store's keys are read through its own API (``keys_of``, ``decode_key``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from faust.types import TP

from streamapp.changelog_records import SkipsUndecodableChangelogRecords
from streamapp.faust_compat.encode_once import Table as EncodeOnceTable
from streamapp.runtime.stores import OnStreamappStore, RocksDBStore

__all__ = ["Table", "rebuild_expiry_heap"]


def rebuild_expiry_heap(table: Any, partitions: Iterable[int]) -> int:
    """Make a windowed table's expiry heap hold exactly its stores' windows of ``partitions``.

    Returns how many windows are in the heap. Does nothing (returns 0) for a table without
    expiry or a store that is not streamapp's RocksDB store.
    """
    if not table._should_expire_keys():
        return 0
    store = table.data
    if not isinstance(store, RocksDBStore):
        return 0
    wanted = set(partitions)
    for partition in list(table._partition_timestamps):
        table._partition_timestamps.pop(partition)
    for where in list(table._partition_timestamp_keys):
        table._partition_timestamp_keys.pop(where)
    for partition in list(table._partition_latest_timestamp):
        if partition not in wanted:
            table._partition_latest_timestamp.pop(partition)
    count = 0
    open_partitions = store.open_partitions()
    for partition in sorted(wanted & open_partitions):
        for raw in store.keys_of(partition):
            key = table._to_key(store.decode_key(raw))
            if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], tuple):
                table._maybe_set_key_ttl(key, partition)
                count += 1
    return count


class Table(OnStreamappStore, SkipsUndecodableChangelogRecords, EncodeOnceTable):
    """streamapp's table (`encode_once.Table`) on streamapp's RocksDB store, whose windows
    expire after a recovery too, and whose recovery skips changelog records it cannot decode
    (`streamapp.changelog_records`)."""

    async def on_recovery_completed(self, active_tps: set[TP], standby_tps: set[TP]) -> None:
        await super().on_recovery_completed(active_tps, standby_tps)
        changelog = self.changelog_topic_name
        rebuild_expiry_heap(self, (tp.partition for tp in active_tps if tp.topic == changelog))
