"""The persisted changelog offset of every store this process has open, known without a read.

Each join's metadata reports the offset up to which every local store has applied its
changelog (`tables.inventory`). Read from disk, that is a read-only RocksDB open of each store:
tens of ms apiece on a busy machine, on aiokafka's consumer thread, at every join, and more the
more stores a worker keeps (up to 0.09 s a join on the rebalance benchmark with 5,000 keys, the
GIL held for much of it). For a store this process has open, the offset is known already: Faust
writes it through ``Store.set_persisted_offset``, and the handle was opened here. So:

- an open of a partition's store notes the offset it holds (one read of the new handle);
- each ``set_persisted_offset`` notes the offset it wrote, after the write;
- `open_offsets` gives, for each store whose handle is open now, the offset noted for that
  very handle; stores not open here are left to the inventory's read-only open.

A noted offset counts only while the handle it was noted for is the one Faust's store holds
(compared by identity, the handle itself is not kept: a handle dropped by Faust's ``stop`` or
``reset_state`` must close as it did). Every handle in the store came through
``_open_for_partition``, which notes its offset, so a handle never has a stale one.

The metadata is built on the consumer thread while the event loop writes: each read here
copies Faust's dict of handles and the noted offsets in one step each (a C-level copy, under
the GIL), and never touches a handle, so a handle closed meanwhile (`store_revoke`) is not
read. The answer is as of that copy, like the disk read it replaces.

Faust private names this module uses (`streamapp.faust_compat.PRIVATE_NAMES`):
``faust.stores.rocksdb.Store._dbs``, ``faust.tables.base.Collection._data`` (a table's store, if
created); the store's ``_open_for_partition`` is wrapped by `store_revoke`, which calls `opened`
here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from faust.stores.rocksdb import Store as RocksDBStore
from faust.types import TP

from streamapp.faust_compat.once import once
from streamapp.set_tables import StoredSets

logger = logging.getLogger(__name__)

#: Where the offsets noted for one store live (partition -> (id of the handle, offset)).
_NOTED = "streamapp_persisted_offsets"


def _noted(store: Any) -> dict[int, tuple[int, int | None]]:
    found: dict[int, tuple[int, int | None]] | None = store.__dict__.get(_NOTED)
    if found is None:
        found = store.__dict__[_NOTED] = {}
    return found


def _parse(raw: Any) -> int | None:
    return None if raw is None else int(raw)


def opened(store: Any, partition: int, db: Any) -> None:
    """Note the offset the store of ``partition`` holds, as just opened (handle ``db``)."""
    try:
        offset = _parse(db.get(store.offset_key))
    except Exception:
        # An offset key that is no integer: the inventory reads it from disk and says so.
        _noted(store).pop(partition, None)
        return
    _noted(store)[partition] = (id(db), offset)


def set_persisted_offset(self: Any, tp: TP, offset: int) -> None:
    """Faust's, noting the offset written for the handle it was written to."""
    _original_set_persisted_offset(self, tp, offset)
    db = self._dbs.get(tp.partition)
    if db is not None:
        _noted(self)[tp.partition] = (id(db), int(offset))


def store_offsets(store: Any) -> dict[int, int | None]:
    """Partition -> last applied offset (None: none yet), for each handle ``store`` has open
    with an offset noted for it."""
    handles = dict(store._dbs)
    noted = dict(_noted(store))
    return {
        partition: offset
        for partition, (handle, offset) in noted.items()
        if partition in handles and id(handles[partition]) == handle
    }


def open_offsets(tables: Iterable[Any]) -> dict[tuple[str, int], int | None]:
    """(table name, partition) -> last applied offset, for every store of ``tables`` open here.

    Tables whose data is not Faust's RocksDB store (in-memory ones) have no stores on disk. A
    table whose store is not created yet has none open: its store is not created here (this
    runs on the consumer thread, and a store created there would take that thread's loop).
    """
    found: dict[tuple[str, int], int | None] = {}
    for table in tables:
        store = vars(table).get("_data")
        if isinstance(store, StoredSets):  # a table of sets: the store its sets are kept in
            store = store.rocksdb
        if isinstance(store, RocksDBStore):
            for partition, offset in store_offsets(store).items():
                found[(table.name, partition)] = offset
    return found


_original_set_persisted_offset: Callable[[Any, TP, int], None] = RocksDBStore.set_persisted_offset


@once
def install() -> None:
    """Patch Faust's RocksDB store class for this process."""
    RocksDBStore.set_persisted_offset = set_persisted_offset  # type: ignore[method-assign]
