"""Faust's mapping semantics on streamapp's RocksDB store: which partition a key is read from
and written to when Faust's table code uses the store as a mapping.

As Faust's RocksDB store does it: a read or write in a stream uses the partition of the current
event (``faust.current_event()``); a global table, a table that partitions by key
(``use_partitioner``) and a read made without an event (a web view, a timer) look in the open
partition the key index names, or in every open partition, asking each one's bloom filter
first. The key index (`RocksDBStore.key_index`, ``table_key_index_size`` keys) notes the
partition each key was last found or written in. Iteration, ``len`` and the views cover the
active partitions (every partition of a global table). Every read sees the partitions' pending
writes; a write or deletion here stores a partition's pending writes first, which are older.
A transactional store (exactly_once) stores neither here: a write or deletion joins the
partition's pending writes, which its transaction's commit stores, and a deletion made for a
record deletes the key in that record's partition, the one its changelog record goes to.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, MutableMapping, ValuesView
from typing import Any

from faust.streams import current_event
from faust.types import TP, AppT, CollectionT
from mode.utils.collections import LRUCache
from rocksdict import Rdict

from streamapp.runtime.pending_writes import PendingWrites
from streamapp.runtime.store_handles import PartitionHandles


class TableMapping:
    """The mapping half of `streamapp.runtime.stores.RocksDBStore` (see the module): its keys
    and values as Faust's table code reads and writes them."""

    # What the store provides.
    app: AppT
    table: CollectionT
    key_type: Any
    value_type: Any
    key_serializer: Any
    value_serializer: Any
    key_index: LRUCache[bytes, int]
    handles: PartitionHandles
    pending_writes: dict[int, PendingWrites]

    @property
    def transactional(self) -> bool:
        raise NotImplementedError

    def read(self, partition: int, key: bytes) -> bytes | None:
        raise NotImplementedError

    def handle(self, partition: int) -> Rdict:
        raise NotImplementedError

    def write_pending(self, partition: int | None = None) -> None:
        raise NotImplementedError

    def stage(self, partition: int, key: bytes, value: bytes | None, source: TP | None) -> None:
        raise NotImplementedError

    def items_of(self, partition: int) -> Iterator[tuple[bytes, bytes]]:
        raise NotImplementedError

    # -- Bytes, as Faust's table reads and writes them (the current event's partition) --

    def _event_partition(self) -> int | None:
        """The current event's partition, when a read or write uses it (Faust's rule)."""
        event = current_event()
        if event is None or self.table.is_global or self.table.use_partitioner:
            return None
        partition: int = event.message.partition
        return partition

    def get_bytes(self, key: bytes) -> bytes | None:
        """The value bytes of ``key``: in a stream, in the current event's partition; else in
        the partition the key index names, or each open partition in turn."""
        # Per record of an agent: `_event_partition` and `read`, inlined.
        event = current_event()
        table = self.table
        if event is None or table.is_global or table.use_partitioner:
            return self._find(key)
        partition: int = event.message.partition
        pending = self.pending_writes.get(partition)
        if pending is not None and key in pending.writes:
            value = pending.writes[key]
        else:
            db = self.handles.open.get(partition)
            value = (self.handle(partition) if db is None else db).get(key)
        if value is not None:
            self.key_index[key] = partition
        return value

    def _find(self, key: bytes) -> bytes | None:
        for partition in self._partitions_for_key(key):
            value = self._read_may_exist(partition, key)
            if value is not None:
                self.key_index[key] = partition
                return value
        return None

    def _read_may_exist(self, partition: int, key: bytes) -> bytes | None:
        """`read`, asking the bloom filter first (a key of another partition is not there)."""
        pending = self.pending_writes.get(partition)
        if pending is not None and key in pending.writes:
            return pending.writes[key]
        db = self.handles.open.get(partition)
        if db is None or not db.key_may_exist(key):
            return None
        value: bytes | None = db.get(key)
        return value

    def _partitions_for_key(self, key: bytes) -> list[int]:
        """The open partition the key index names, or every open partition."""
        try:
            partition = self.key_index[key]
        except KeyError:
            return list(self.handles.open)
        return [partition] if partition in self.handles.open else list(self.handles.open)

    def set_bytes(self, key: bytes, value: bytes | None) -> None:
        """Store ``value`` for ``key`` in the current event's partition (after the partition's
        pending writes, which are older). A None value raises, as rocksdict's ``put`` does."""
        event = current_event()
        if event is None:
            raise RuntimeError("Cannot modify table outside of agent/stream.")
        partition: int = event.message.partition
        if self.transactional:
            if value is None:  # as rocksdict's put takes it
                raise TypeError(f"a table value cannot be None (key {key!r})")
            self.key_index[key] = partition
            self.stage(partition, key, value, event.message.tp)
            return
        pending = self.pending_writes.get(partition)
        if pending is not None and pending.writes:
            self.write_pending(partition)
        db = self.handles.open.get(partition)
        if db is None:
            db = self.handle(partition)
        self.key_index[key] = partition
        db.put(key, value)

    def delete_bytes(self, key: bytes) -> None:
        """Delete ``key`` in the partition the key index names, or in every open partition
        (transactional: in the current event's partition, when Faust's rule uses one)."""
        if self.transactional:
            event = current_event()
            partition = self._event_partition()
            source = None if event is None else event.message.tp
            targets = [partition] if partition is not None else self._partitions_for_key(key)
            for each in targets:
                self.stage(each, key, None, source)
            return
        for partition in self._partitions_for_key(key):
            self.write_pending(partition)
            self.handle(partition).delete(key)

    def contains_bytes(self, key: bytes) -> bool:
        """Whether ``key`` has a value (where `get_bytes` looks, without the index noting it)."""
        partition = self._event_partition()
        if partition is not None:
            return self.read(partition, key) is not None
        return any(self._read_may_exist(p, key) is not None for p in self._partitions_for_key(key))

    def _visible_partitions(self) -> list[int]:
        """The open partitions a whole-table read covers: the active ones (all of a global
        table's)."""
        if self.table.is_global:
            return list(self.handles.open)
        actives = self.app.assignor.assigned_actives()
        topic = self.table.changelog_topic.get_topic_name()
        return [p for p in list(self.handles.open) if TP(topic, p) in actives]

    def raw_items(self) -> Iterator[tuple[bytes, bytes]]:
        """Key and value bytes of every active partition (Faust's iteration of a table)."""
        for partition in self._visible_partitions():
            yield from self.items_of(partition)

    # -- Keys and values --

    def encode_key(self, key: Any) -> bytes:
        """The bytes of ``key`` (the table's key type and serializer)."""
        raw = self.app.serializers.dumps_key(self.key_type, key, serializer=self.key_serializer)
        if raw is None:
            raise TypeError("Table key cannot be None")
        return raw

    def encode_value(self, value: Any) -> bytes | None:
        """The bytes of ``value`` (the table's value type and serializer)."""
        raw: bytes | None = self.app.serializers.dumps_value(
            self.value_type, value, serializer=self.value_serializer
        )
        return raw

    def decode_key(self, raw: bytes) -> Any:
        return self.app.serializers.loads_key(self.key_type, raw, serializer=self.key_serializer)

    def decode_value(self, raw: bytes) -> Any:
        return self.app.serializers.loads_value(
            self.value_type, raw, serializer=self.value_serializer
        )

    # -- The mapping Faust's table code uses --

    def __getitem__(self, key: Any) -> Any:
        value = self.get_bytes(self.encode_key(key))
        if value is None:
            raise KeyError(key)
        return self.decode_value(value)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.set_bytes(self.encode_key(key), self.encode_value(value))

    def __delitem__(self, key: Any) -> None:
        self.delete_bytes(self.encode_key(key))

    def __contains__(self, key: object) -> bool:
        return self.contains_bytes(self.encode_key(key))

    def __iter__(self) -> Iterator[Any]:
        for key, _ in self.raw_items():
            yield self.decode_key(key)

    def __len__(self) -> int:
        return sum(1 for _ in self.raw_items())

    def keys(self) -> _KeysView:
        return _KeysView(self)

    def values(self) -> _ValuesView:
        return _ValuesView(self)

    def items(self) -> _ItemsView:
        return _ItemsView(self)

    def copy(self) -> dict[Any, Any]:
        return dict(self.items())

    def update(self, *args: Any, **kwargs: Any) -> None:
        MutableMapping.update(self, *args, **kwargs)

    def clear(self) -> None:
        raise NotImplementedError("a RocksDB table cannot be cleared")


class _KeysView(KeysView[Any]):
    def __init__(self, store: TableMapping) -> None:
        super().__init__(store)
        self.store = store

    def __iter__(self) -> Iterator[Any]:
        for key, _ in self.store.raw_items():
            yield self.store.decode_key(key)


class _ValuesView(ValuesView[Any]):
    def __init__(self, store: TableMapping) -> None:
        super().__init__(store)
        self.store = store

    def __iter__(self) -> Iterator[Any]:
        for _, value in self.store.raw_items():
            yield self.store.decode_value(value)


class _ItemsView(ItemsView[Any, Any]):
    def __init__(self, store: TableMapping) -> None:
        super().__init__(store)
        self.store = store

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        store = self.store
        for key, value in store.raw_items():
            yield store.decode_key(key), store.decode_value(value)
