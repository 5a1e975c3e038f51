"""Tables of sets (``app.SetTable``, ``app.SetGlobalTable``) whose RocksDB store holds each set as
it is now.

Faust keeps a table of sets in memory and mirrors it into the table's store. On Faust's default
in-memory store the mirror is the live set itself, so nothing can go stale. On a store that
serializes (RocksDB, streamapp's default), three of Faust's behaviours lose updates:

- the store is written before the set changes (mode's ``ManagedUserSet`` calls the hook that
  writes it, then changes the set), so each key is stored as it was before its last operation;
- a completed recovery reloads every set from the store, including sets of partitions that
  never moved, undoing each key's last operation in memory;
- changelog records replayed by recovery and standbys change memory only, yet move the store's
  persisted offset past them, so a restarted worker replays nothing and loads stale sets.

Here the store is the truth and memory a cache of the active partitions' sets:

- an operation stores the set as it is after the operation, in the partition of the record
  being processed, right after its changelog record is sent;
- a replayed changelog record is applied to the set stored in its own partition, and the
  partition's persisted offset is written with the sets it covers, in one write batch
  (`StoredSets.apply_changelog_batch`);
- a completed recovery loads the partitions it recovered and drops those no longer active;
  the sets of partitions that stayed are left as they are.

An operation also sends its changelog record when it does not change the set in memory (adding
a member already there). After a crash under at-least-once, the store may hold an operation
whose changelog record was never sent; the input record that made it is processed again, and
its record then reaches the changelog, so a replica or a later owner that rebuilds the set from
the changelog sees it too. Operations are idempotent, so a replay applies them again safely.

A key belongs to the partition of the records that change it, as a `Table`'s key does on
RocksDB (docs/migrating-from-faust.md).

`SetTable` and `SetGlobalTable` are the App's ``SetTable`` / ``SetGlobalTable`` settings: Faust's,
whose ``data`` (the table's store, Faust's manager of sets) is a `StoredSets`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import faust
from faust.streams import current_event
from faust.tables.sets import (
    OPERATION_ADD,
    OPERATION_DISCARD,
    OPERATION_UPDATE,
    ChangeloggedSet,
    ChangeloggedSetManager,
)
from faust.types import TP, EventT
from faust.types.tables import GlobalTableT

from streamapp.changelog_records import SkipsUndecodableChangelogRecords
from streamapp.runtime.stores import OnStreamappStore, RocksDBStore

logger = logging.getLogger(__name__)


def apply_operation(members: set[Any], operation: int, value: Any) -> None:
    """Apply one changelog operation of a table of sets to ``members``, in place.

    Raises `ValueError` for an operation Faust's sets do not have.
    """
    if operation == OPERATION_ADD:
        members.add(value)
    elif operation == OPERATION_DISCARD:
        members.discard(value)
    elif operation == OPERATION_UPDATE:
        added, removed = value
        members |= set(added)
        members -= set(removed)
    else:
        raise ValueError(f"unknown set operation {operation!r}")


class StoredSet(ChangeloggedSet[Any]):
    """One set of a table of sets, whose ``add``, ``discard``, ``update`` and
    ``difference_update`` always send their changelog record (see the module docs)."""

    def add(self, element: Any) -> None:
        self.on_add(element)
        self.data.add(element)

    def discard(self, element: Any) -> None:
        self.on_discard(element)
        self.data.discard(element)

    def update(self, other: Iterable[Any]) -> None:
        added = set(other)
        self.on_change(added=added, removed=set())
        self.data |= added

    def difference_update(self, other: Iterable[Any]) -> None:
        removed = set(other)
        self.on_change(added=set(), removed=removed)
        self.data -= removed


class StoredSets(ChangeloggedSetManager):
    """The sets of one table of sets: in memory for the active partitions, in the table's
    store for every partition held here (see the module docs).

    A store other than streamapp's RocksDB store (``memory://``) keeps Faust's behaviour, which
    is right there: its stored sets are the live ones.
    """

    ValueType = StoredSet

    def __init__(self, table: Any, **kwargs: Any) -> None:
        super().__init__(table, **kwargs)
        #: Partition of each set in memory that came from, or was written to, a partition.
        self.partition_of: dict[Any, int] = {}
        #: Partitions whose sets are in memory.
        self.loaded: set[int] = set()
        # Created now, not on first use: the worker's metadata reads it from another thread.
        self.rocksdb = self.storage if isinstance(self.storage, RocksDBStore) else None

    @property
    def changelog_topic(self) -> str:
        return str(self.table.changelog_topic.get_topic_name())

    def send_changelog_event(self, key: Any, operation: int, value: Any) -> None:
        """Send one operation on the set of ``key`` to the changelog, and store the set as it
        is after the operation (Faust stores it as it was before)."""
        event = current_event()
        if event is None:
            raise RuntimeError("Cannot modify table outside of agent/stream.")
        after = set(self.set_of(key).data)
        apply_operation(after, operation, value)
        partition = event.message.partition
        self.table.send_changelog(partition, (operation, key), value)
        self.storage[key] = after
        self.partition_of[key] = partition

    def apply_changelog_batch(
        self,
        batch: Iterable[EventT[Any]],
        to_key: Callable[[Any], Any],
        to_value: Callable[[Any], Any],
    ) -> None:
        """Apply replayed changelog records to the sets stored in their partitions, each
        partition's with its persisted offset past them in one write batch; sets of loaded
        partitions in memory too."""
        if self.rocksdb is None:
            super().apply_changelog_batch(batch, to_key, to_value)
            return
        changed: dict[int, dict[Any, set[Any]]] = {}
        offsets: dict[int, int] = {}
        for event in batch:
            tp = event.message.tp
            offsets[tp.partition] = max(event.message.offset, offsets.get(tp.partition, -1))
            if event.key is None:
                raise RuntimeError("Changelog key cannot be None")
            operation, raw_key = event.key
            key = to_key(raw_key)
            sets = changed.setdefault(tp.partition, {})
            members = sets.get(key)
            if members is None:
                members = sets[key] = self.stored(tp.partition, key)
            apply_operation(members, operation, to_value(event.value))
        for partition, sets in changed.items():
            self._write(partition, sets, offsets[partition])
        for partition, sets in changed.items():
            if partition in self.loaded:
                for key, members in sets.items():
                    self._cache(key, members, partition)

    async def on_rebalance(  # type: ignore[override]
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        # Faust's manager takes the table first and shifts every argument (see its XXX note);
        # the table calls this with the store's arguments.
        await self.storage.on_rebalance(assigned, revoked, newly_assigned, generation_id)
        topic = self.changelog_topic
        for tp in revoked:
            if tp.topic == topic and tp not in assigned:
                self._drop(tp.partition)

    async def on_recovery_completed(self, active_tps: set[TP], standby_tps: set[TP]) -> None:
        """Load the sets of the partitions recovery just made current here, and drop those of
        partitions no longer active; the rest stay as they are."""
        if self.rocksdb is None:
            await super().on_recovery_completed(active_tps, standby_tps)
            return
        topic = self.changelog_topic
        recovered = {tp.partition for tp in active_tps if tp.topic == topic}
        if not self.table.is_global:
            # Every partition of a global table is active everywhere.
            actives = self.table.app.assignor.assigned_actives()
            for partition in self.loaded - {tp.partition for tp in actives if tp.topic == topic}:
                self._drop(partition)
        for partition in sorted(recovered):
            self._load(partition)

    def set_of(self, key: Any) -> StoredSet:
        found = self[key]
        assert isinstance(found, StoredSet)
        return found

    def stored(self, partition: int, key: Any) -> set[Any]:
        """The set of ``key`` as stored in ``partition`` (empty if none is)."""
        raw = self._rocksdb().read(partition, self._key_bytes(key))
        if raw is None:
            return set()
        return set(self._value_of(raw))

    def stored_sets(self, partition: int) -> Iterator[tuple[Any, set[Any]]]:
        """Every set stored in ``partition``."""
        storage = self._rocksdb()
        for raw_key, raw in storage.items_of(partition):
            yield storage.decode_key(raw_key), set(self._value_of(raw))

    def _rocksdb(self) -> RocksDBStore:
        assert self.rocksdb is not None, "only a RocksDB store keeps sets by partition"
        return self.rocksdb

    def _key_bytes(self, key: Any) -> bytes:
        storage = self.storage
        raw = self.table.app.serializers.dumps_key(
            storage.key_type, key, serializer=storage.key_serializer
        )
        if raw is None:
            raise TypeError("Table key cannot be None")
        return raw

    def _value_of(self, raw: bytes) -> Any:
        storage = self.storage
        return self.table.app.serializers.loads_value(
            storage.value_type, raw, serializer=storage.value_serializer
        )

    def _write(self, partition: int, sets: dict[Any, set[Any]], offset: int) -> None:
        """Store ``sets`` in ``partition`` with its persisted ``offset``, in one write batch."""
        storage = self.storage
        serializers = self.table.app.serializers
        writes: dict[bytes, bytes | None] = {}
        for key, members in sets.items():
            writes[self._key_bytes(key)] = serializers.dumps_value(
                storage.value_type, members, serializer=storage.value_serializer
            )
        self._rocksdb().write(partition, writes, offset)

    def _cache(self, key: Any, members: set[Any], partition: int) -> None:
        self.set_of(key).data = set(members)
        self.partition_of[key] = partition

    def _load(self, partition: int) -> None:
        self._drop(partition)
        count = 0
        for key, members in self.stored_sets(partition):
            self._cache(key, members, partition)
            count += 1
        self.loaded.add(partition)
        logger.debug("%s: %d sets of partition %d loaded", self.table.name, count, partition)

    def _drop(self, partition: int) -> None:
        for key in [k for k, p in self.partition_of.items() if p == partition]:
            del self.partition_of[key]
            self.data.pop(key, None)
        self.loaded.discard(partition)


class SetTable(OnStreamappStore, SkipsUndecodableChangelogRecords, faust.SetTable[Any, Any]):
    """Faust's SetTable whose RocksDB store (streamapp's) holds each set as it is now (see the
    module), and whose recovery skips changelog records it cannot decode."""

    #: The table's sets, made at the first use of `data`.
    stored_sets: StoredSets | None = None

    @property
    def data(self) -> StoredSets:  # type: ignore[override]
        """The table's store: its sets (Faust's table reads and writes its store here)."""
        sets = self.stored_sets
        if sets is None:
            sets = self.stored_sets = StoredSets(self)
        return sets


class SetGlobalTable(SetTable, GlobalTableT):
    """`SetTable` held whole by every worker (``streamapp.App.SetGlobalTable`` makes it global:
    Faust's ``app.SetGlobalTable`` does not, and each worker held only its own partitions)."""
