"""streamapp's ``app.Table``: Faust's windowed tables expire their windows, recovered ones too.

A Faust windowed table (``app.Table(...).tumbling(size, expires=...)``, ``.hopping(...)``)
deletes a window's keys once the window is stale for its ``expires``, by the wall clock, every
``table_cleanup_interval`` (Faust's setting, 60 s by default), and then calls the table's
``on_window_close`` (its ``on_window_close=`` argument) with the key and its last value, once
per window start not closed before. Faust finds them in a heap kept in memory and filled by
the writes this process made, so windows that come back from RocksDB or the changelog never
expire (faust-streaming/faust #385: tests/integration/test_windows.py shows it on a real
broker).

Here the table keeps that expiry itself (`streamapp.key_expiry.KeyExpiry`) and runs it from
its own task (`expire_windows`, every ``table_cleanup_interval``):

- every write and deletion notes its key (`key_written`, `key_deleted`: Faust's
  ``on_key_set`` / ``on_key_del`` call them, and so does the write of bytes of
  `streamapp.table_writes.encode_once`);
- after each recovery, the index of the table's active partitions is rebuilt from what their
  RocksDB stores hold (streamapp's store keeps each partition in its own database, so a key's
  partition is known): recovered windows expire as written ones do. Partitions no longer active
  are dropped, so a cleanup never deletes what this worker does not hold any more. A standby
  partition is left alone: it is rebuilt when it becomes active;
- a cleanup deletes each due key from the table's store, as Faust's does: no changelog record
  is sent for it (the changelog of a windowed table is compacted and deleted by retention,
  ``expires``, which Faust sets on it). A key recovered from the changelog after its window
  expired is expired again at the next cleanup.

The table's "now" (``relative_to_now()``, ``.now()`` in an agent) is the latest window end
written in the event's partition, as Faust's, read from the same index
(`streamapp.table_writes.window_clock`).

Tables on another store (``memory://``) keep the index from their writes only, as Faust did:
nothing is recovered into them from disk.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from faust.types import TP
from mode import Service

from streamapp.changelog_records import SkipsUndecodableChangelogRecords
from streamapp.key_expiry import KeyExpiry, is_window_key, window_key
from streamapp.runtime.stores import OnStreamappStore, RocksDBStore
from streamapp.table_writes.encode_once import Table as EncodeOnceTable
from streamapp.table_writes.window_clock import WindowClock

__all__ = ["ExpiringWindows", "Table"]


class ExpiringWindows(WindowClock, EncodeOnceTable):
    """A table whose windows expire by streamapp's own index and task (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The windows written and recovered, per partition, by end.
        self.window_expiry = KeyExpiry()

    def expires_windows(self) -> bool:
        """Whether the table is windowed with an ``expires`` (decided by ``.tumbling()`` /
        ``.hopping()``, which set the window after the table is made)."""
        window = self.window
        return window is not None and window.expires is not None

    def key_written(self, key: Any, value: Any, partition: int) -> None:
        if self.expires_windows():
            self.window_expiry.note_set(key, partition)
        super().key_written(key, value, partition)

    def key_deleted(self, key: Any, partition: int) -> None:
        if self.expires_windows():
            self.window_expiry.note_del(key, partition)
        super().key_deleted(key, partition)

    def latest_window_end(self, partition: int) -> float:
        return self.window_expiry.latest_end(partition)

    @Service.task
    async def expire_windows(self) -> None:
        """Every ``table_cleanup_interval``, the windows due are deleted."""
        if not self.expires_windows():
            return
        interval = self.app.conf.table_cleanup_interval
        await self.sleep(interval)
        async for _ in self.itertimer(interval, name="window_expiry"):
            await self.delete_expired_windows()

    async def delete_expired_windows(self, now: float | None = None) -> int:
        """Delete the keys of every window stale at ``now`` (the wall clock if None) from the
        store, and report each window start not closed yet to ``on_window_close``, as Faust's
        cleanup does. Returns how many keys were due."""
        window = self.window
        if window is None or window.expires is None:
            return 0
        at = time.time() if now is None else now
        due = self.window_expiry.take_due(lambda end: window.stale(end, at))
        deleted = 0
        store = self.data
        for _partition, keys in due:
            for key in keys:
                value = store.pop(key, None)
                deleted += 1
                if key[1][0] > self.last_closed_window:
                    await self.on_window_close(key, value)
            self.last_closed_window = max(self.last_closed_window, max(k[1][0] for k in keys))
        return deleted

    async def on_recovery_completed(self, active_tps: set[TP], standby_tps: set[TP]) -> None:
        await super().on_recovery_completed(active_tps, standby_tps)
        changelog = self.changelog_topic_name
        self.rebuild_window_expiry(tp.partition for tp in active_tps if tp.topic == changelog)

    def rebuild_window_expiry(self, partitions: Iterable[int]) -> int:
        """Make the expiry index hold exactly the windows the store holds in ``partitions``
        (the table's active changelog partitions). Returns how many windows it holds; 0, and
        nothing changed, for a table without expiry or whose store is not streamapp's RocksDB
        store."""
        if not self.expires_windows():
            return 0
        store = self.data
        if not isinstance(store, RocksDBStore):
            return 0
        wanted = set(partitions)
        held: dict[int, list[Any]] = {}
        for partition in sorted(wanted & store.open_partitions()):
            keys = (window_key(store.decode_key(raw)) for raw in store.keys_of(partition))
            held[partition] = [key for key in keys if is_window_key(key)]
        return self.window_expiry.rebuild(wanted, held)


class Table(OnStreamappStore, SkipsUndecodableChangelogRecords, ExpiringWindows):
    """streamapp's table (the App's ``Table`` setting): a write encoded once
    (`streamapp.table_writes.encode_once`), windows expiring after a recovery too (see the
    module), on streamapp's RocksDB store, whose recovery skips changelog records it cannot
    decode (`streamapp.changelog_records`)."""
