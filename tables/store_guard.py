"""Where `tables.damaged` meets a table's RocksDB store: close a partition's store, set it aside.

The store keeps one open rocksdict handle per partition and opens a missing one on first use,
creating an empty store. So a store set aside while the worker runs must first leave the open
handles and be closed (RocksDB holds its directory's ``LOCK``), and the store's key -> partition
index must forget it (its entries would send reads to a partition it no longer has); the next
use then creates a fresh store, which recovery fills from the changelog. The store does both
(``close_partition``): this module needs no more of it than `PartitionStore` says, which
streamapp's store (`streamapp.runtime.stores`) provides; a store without it (``memory://``,
Faust's own RocksDB store) has nothing here to guard.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, runtime_checkable

from faust.tables.objects import ChangeloggedObjectManager
from faust.types import TP
from faust.types.tables import CollectionT

from tables.damaged import beyond_partition_count, move_aside, stores_of, unreadable_because

logger = logging.getLogger(__name__)


@runtime_checkable
class PartitionStore(Protocol):
    """What this module needs of a table's store: one store on disk per partition, at Faust's
    paths, whose open handles it can tell and close."""

    def partition_path(self, partition: int) -> Path:
        """Where the store of ``partition`` is (``<tabledir>/<table>-<partition>.db``)."""
        ...

    @property
    def basename(self) -> Path:
        """The prefix of the table's store directories (its name)."""
        ...

    def open_partitions(self) -> set[int]:
        """The partitions whose store is open here."""
        ...

    def close_partition(self, partition: int) -> None:
        """Close the partition's store if open, and forget it (the next use creates it)."""
        ...


def rocksdb_store(table: CollectionT) -> PartitionStore | None:
    """The table's store when it keeps its partitions on disk as `PartitionStore` says (a
    memory store has nothing on disk); for a table of sets, the store its sets are kept in."""
    # `data` is on Faust's Collection, not on the CollectionT interface.
    store = table.data  # type: ignore[attr-defined]
    if isinstance(store, ChangeloggedObjectManager):
        store = store.storage
    return store if isinstance(store, PartitionStore) else None


def changelog_topic(table: CollectionT) -> str:
    return table.changelog_topic.get_topic_name()


def close_and_move_aside(table: CollectionT, partition: int) -> Path | None:
    """Close the table's store of ``partition`` if it is open, and move it into ``damaged/``.

    Returns where it went; None when there was no store on disk to move.
    """
    store = rocksdb_store(table)
    if store is None:
        return None
    store.close_partition(partition)
    path = store.partition_path(partition)
    if not path.exists():
        return None
    return move_aside(path)


def set_aside_unreadable(table: CollectionT, tps: Iterable[TP]) -> list[Path]:
    """Before Faust opens the stores of ``tps`` (an assignment): the unreadable ones go aside.

    Stores open already are left alone: their handles work whatever happened on disk since.
    Faust would otherwise raise RocksDB's ``Corruption`` out of the rebalance.
    """
    store = rocksdb_store(table)
    if store is None:
        return []
    topic = changelog_topic(table)
    moved: list[Path] = []
    for partition in sorted({tp.partition for tp in tps if tp.topic == topic}):
        if partition in store.open_partitions():
            continue
        path = store.partition_path(partition)
        error = unreadable_because(path) if path.is_dir() else None
        if error is None:
            continue
        target = move_aside(path)
        logger.warning(
            "streamapp: local store of table %s partition %d is unreadable (%s): moved to %s; "
            "it is restored from the changelog",
            table.name,
            partition,
            error,
            target,
        )
        moved.append(target)
    return moved


def set_aside_beyond_partition_count(table: CollectionT, partition_count: int | None) -> list[Path]:
    """Stores of partitions the table's changelog no longer has go aside (one warning each).

    Nobody is ever assigned such a partition, so its store is not open; left in place it would
    be reported to the group as local state of a task that does not exist.
    """
    store = rocksdb_store(table)
    if store is None or partition_count is None:
        return []
    basename = str(store.basename)
    moved: list[Path] = []
    for found in stores_of(store.partition_path(0).parent, [basename]):
        partition, path = found.partition, found.path
        if not beyond_partition_count(partition, partition_count):
            continue
        if partition in store.open_partitions():
            continue
        target = move_aside(path)
        logger.warning(
            "streamapp: local store of table %s partition %d is beyond the %d partitions of "
            "its changelog %s: moved to %s",
            table.name,
            partition,
            partition_count,
            changelog_topic(table),
            target,
        )
        moved.append(target)
    return moved
