"""The table `streamapp.App` makes: Faust's, with one encoding of each key and value a write needs.

``table[key] += 1`` on a Faust table serializes the key four times and the value twice: the
read asks the store whether the key is there and then for its value (two key encodings and two
reads of rocksdict), and the write sends the changelog record (key and value encoded by the
changelog topic) and then stores the same key and value (encoded again by the store), six
``json.dumps`` calls where two give the same bytes. Here a read encodes the key and reads the
store once, and a write encodes the key and value once and gives those bytes to both the
changelog and the store. The key a read just encoded is kept, by identity, for the write that
follows it (``table[key] += 1`` passes the same object twice), when it is an immutable str,
bytes or int. The store's codecs are looked up once per table, not per key and value
(`streamapp.codecs.resolved`), when the store encodes as Faust's own does.

The bytes are the same as before: the changelog topic Faust makes for a table encodes with the
table's key and value types and serializers, as the store does. A table whose changelog would
encode otherwise (a table ``schema``, a ``changelog_topic`` of other types or serializers), or
whose store is not streamapp's RocksDB store (``memory://``, which keeps objects rather than
bytes), keeps Faust's way.

The store's bytes are read and written through its own API (`streamapp.runtime.stores`:
``encode_key``, ``encode_value``, ``decode_value``, ``get_bytes``, ``set_bytes``).

What Faust's ``on_key_set`` and ``on_key_del`` do after the changelog record is sent is
`key_written` and `key_deleted` here, called by every write and deletion, with bytes or not
(``on_key_set`` and ``on_key_del`` are overridden to call them): the app's sensors
(``app.sensors.on_table_set`` / ``on_table_del``), and in a subclass whatever else a write
notes (`streamapp.expiring_tables`: a windowed table's expiry). Faust's own window expiry
bookkeeping is not fed: streamapp's table keeps its own.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, KeysView, ValuesView
from typing import Any, cast

import faust
from faust.serializers.schemas import Schema

from streamapp.codecs import resolved as resolved_codecs
from streamapp.runtime.stores import RocksDBStore
from streamapp.sending import batch_changelog
from streamapp.table_writes import batch_table

#: Keys immutable enough to be reused by identity between a read and the write after it.
_MEMO_KEY_TYPES = (str, bytes, int)


class Table(faust.Table[Any, Any]):
    """A `faust.Table` whose reads and writes encode each key and value once (see the module)."""

    # The key last encoded and its bytes: `table[key] += 1` reads and then writes one key.
    _last_key: Any = None
    _last_key_bytes: bytes | None = None
    _encodes_once: bool | None = None  # decided at the first read or write
    _same_bytes_store: RocksDBStore | None = None  # the store, if it encodes once
    _batch_changelog_topic: str | None = None  # the changelog topic's name, for batches
    _in_batches = False  # reads and writes in a batch take batch_table's path (decided once)
    # The batch last seen and this table's part of it (None: Faust's store calls).
    _last_batch_table: tuple[Any, batch_table.BatchTable | None] | None = None
    # The store's codecs looked up once (resolved_codecs), when it encodes as Faust's does.
    _dump_key: Callable[[Any], bytes | None] | None = None
    _dump_value: Callable[[Any], bytes | None] | None = None
    _load_value: Callable[[bytes], Any] | None = None

    def __getitem__(self, key: Any) -> Any:
        store = self._serialized_store()
        if store is None:
            return super().__getitem__(key)
        in_batch = self._batch_table(store)
        if in_batch is None:
            # Faust's: on_key_get, then `key in store` and `store[key]`, each encoding the key.
            self._store_batches()
            self.on_key_get(key)
            key_bytes = self._key_bytes(store, key)
            value = store.get_bytes(key_bytes)
        else:  # the same, with the batch's partition and sensors looked up once (batch_table)
            key_bytes = self._key_bytes(store, key)
            value = in_batch.get(key, key_bytes)
        if value is None:
            return self.__missing__(key)
        load_value = self._load_value
        if load_value is not None:
            try:
                return load_value(value)
            except Exception:  # the store's own decoding raises Faust's error
                pass
        return store.decode_value(value)

    def __setitem__(self, key: Any, value: Any) -> None:
        store = self._serialized_store()
        if store is None:
            return super().__setitem__(key, value)
        key_bytes = self._key_bytes(store, key)
        dump_value = self._dump_value
        value_bytes = store.encode_value(value) if dump_value is None else dump_value(value)
        changelog = batch_changelog.current()
        if changelog is not None:
            in_batch = self._batch_table(store, changelog)
            if in_batch is not None:
                # Faust's on_key_set and the store's write, with what they look up per call
                # looked up once per batch (batch_table); the record joins the batch's.
                self._add_to_batch(
                    changelog,
                    key,
                    self._batch_write_partition(in_batch, key),
                    key_bytes,
                    value_bytes,
                )
                in_batch.set(key, value, key_bytes, value_bytes)
                return None
            self._store_batches()
            partition = self.partition_for_key(key)
            if partition is not None:
                # In a batch: the record joins the batch's, sent as the batch ends.
                self._add_to_batch(changelog, key, partition, key_bytes, value_bytes)
                self.key_written(key, value, partition)
                store.set_bytes(key_bytes, value_bytes)
                return None
        # Faust's on_key_set, then the store's write, in that order, with the bytes above: the
        # changelog topic takes bytes as they are ("raw").
        self._store_batches()
        fut = self.send_changelog(
            self.partition_for_key(key),
            key_bytes,
            value_bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        partition = fut.message.partition
        assert partition is not None  # eager partitioning: the changelog partition is known
        self.key_written(key, value, partition)
        store.set_bytes(key_bytes, value_bytes)

    def __delitem__(self, key: Any) -> None:
        # In a batch: Faust's on_key_del (the record joins the batch's, the key's ttl, the
        # sensors), then the store's deletion, which waits with the batch's writes
        # (batch_table) instead of storing them first.
        store = self._serialized_store()
        changelog = batch_changelog.current()
        in_batch = None
        if store is not None and changelog is not None:
            in_batch = self._batch_table(store, changelog)
        if store is None or changelog is None or in_batch is None:
            return super().__delitem__(key)  # Faust's: on_key_del (below), the store's _del
        partition = self._batch_write_partition(in_batch, key)
        key_bytes = self._key_bytes(store, key)
        self._deletion_in_batch(changelog, key, partition, key_bytes)
        in_batch.delete(key_bytes)
        return None

    def on_key_set(self, key: Any, value: Any) -> None:
        # Faust's: the changelog record, then what a write notes (`key_written`). Faust's
        # ``__setitem__`` calls it for a table that keeps Faust's way, and ``update``.
        fut = self.send_changelog(self.partition_for_key(key), key, value)
        partition = fut.message.partition
        assert partition is not None  # eager partitioning: the changelog partition is known
        self.key_written(key, value, partition)

    def key_written(self, key: Any, value: Any, partition: int) -> None:
        """What a write of ``key`` notes once its changelog record is on its way to
        ``partition``: the app's sensors (a subclass notes more, then calls this)."""
        self.app.sensors.on_table_set(self, key, value)

    def key_deleted(self, key: Any, partition: int) -> None:
        """What a deletion of ``key`` notes once its changelog record is on its way to
        ``partition``: the app's sensors (a subclass notes more, then calls this)."""
        self.app.sensors.on_table_del(self, key)

    def on_key_del(self, key: Any) -> None:
        # ``clear``, and ``del table[key]`` or ``pop`` on a table batch_table does not take: in
        # a batch, the deletion's record goes in the batch's changelog, after the writes before
        # it, as Faust's on_key_del would. The store's deletion follows: the batches' writes
        # are stored before it.
        self._store_batches()
        store, changelog, partition = self._batch_target(key)
        if store is None or changelog is None or partition is None:
            # Faust's: the deletion's changelog record (a tombstone), then what it notes.
            fut = self.send_changelog(
                self.partition_for_key(key), key, value=None, value_serializer="raw"
            )
            sent_to = fut.message.partition
            assert sent_to is not None  # eager partitioning: the changelog partition is known
            self.key_deleted(key, sent_to)
            return None
        self._deletion_in_batch(changelog, key, partition, self._key_bytes(store, key))
        in_batch = changelog.tables.get(id(self))
        if in_batch is not None:
            # The store's deletion, next, finds the key's partition in its key index: the
            # batch's keys go there first, as Faust's per-call path would have put them.
            in_batch.index_keys()
        return None

    # Faust's reads of the whole table, and its writes of many keys, go to the store itself:
    # the batches' writes are stored first (`batch_table`).

    def __contains__(self, key: object) -> bool:
        store = self._serialized_store()
        if store is not None:
            in_batch = self._batch_table(store)
            if in_batch is not None:  # the store's _contains, the batch's writes first
                return in_batch.contains(self._key_bytes(store, key))
        self._store_batches()
        return super().__contains__(key)

    def __iter__(self) -> Iterator[Any]:
        self._store_batches()
        return super().__iter__()

    def __len__(self) -> int:
        self._store_batches()
        return super().__len__()

    def keys(self) -> KeysView[Any]:
        self._store_batches()
        return super().keys()

    def values(self) -> ValuesView[Any]:
        self._store_batches()
        return super().values()

    def items(self) -> ItemsView[Any, Any]:
        self._store_batches()
        return super().items()

    def copy(self) -> dict[Any, Any]:
        self._store_batches()
        return super().copy()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._store_batches()
        super().update(*args, **kwargs)

    def clear(self) -> None:
        self._store_batches()
        super().clear()

    def _store_batches(self) -> None:
        """Write the batches' pending writes of this table's store to it (`batch_table`), before
        a read or write that goes to the store without them."""
        store = self._same_bytes_store
        if store is not None and self._in_batches:
            store.write_pending()

    def _batch_target(
        self, key: Any
    ) -> tuple[RocksDBStore | None, batch_changelog.BatchChangelog | None, int | None]:
        """The store, the batch's changelog and the changelog partition of a write in a batch
        (Nones outside one, or for a table that keeps Faust's way)."""
        changelog = batch_changelog.current()
        if changelog is None:
            return None, None, None
        store = self._serialized_store()
        if store is None:
            return None, None, None
        return store, changelog, self.partition_for_key(key)

    def _batch_table(
        self,
        store: RocksDBStore,
        changelog: batch_changelog.BatchChangelog | None = None,
    ) -> batch_table.BatchTable | None:
        """This table's part of the batch being processed, if it takes `batch_table`'s path."""
        if not self._in_batches:
            return None
        if changelog is None:
            changelog = batch_changelog.current()
            if changelog is None:
                return None
        last = self._last_batch_table
        if last is not None and last[0] is changelog:
            return last[1]
        tables = changelog.tables
        key = id(self)
        if key in tables:  # another task's batch came in between
            found = tables[key]
        else:
            found = tables[key] = batch_table.for_batch(self, store)
        self._last_batch_table = (changelog, found)
        return found

    def _batch_write_partition(self, in_batch: batch_table.BatchTable, key: Any) -> int:
        """The changelog partition of the batch's writes: the table's ``partition_for_key``
        (its co-partitioning check included), asked once per batch."""
        partition = in_batch.write_partition
        if partition is None:
            partition = in_batch.write_partition = self.partition_for_key(key)
            assert partition is not None  # the table does not partition by key
        return partition

    def _deletion_in_batch(
        self,
        changelog: batch_changelog.BatchChangelog,
        key: Any,
        partition: int,
        key_bytes: bytes,
    ) -> None:
        """What Faust's ``on_key_del`` does, the deletion's record joining the batch's."""
        self._add_to_batch(changelog, key, partition, key_bytes, None)
        self.key_deleted(key, partition)

    def _add_to_batch(
        self,
        changelog: batch_changelog.BatchChangelog,
        key: Any,
        partition: int,
        key_bytes: bytes,
        value_bytes: bytes | None,
    ) -> None:
        topic = self._batch_changelog_topic
        if topic is None:
            topic = self._batch_changelog_topic = self.changelog_topic.get_topic_name()
        changelog.add(self, topic, partition, key_bytes, value_bytes)

    def _key_bytes(self, store: RocksDBStore, key: Any) -> bytes:
        if key is self._last_key and self._last_key_bytes is not None:
            return self._last_key_bytes
        dump_key = self._dump_key
        key_bytes = dump_key(key) if dump_key is not None else None
        if key_bytes is None:  # the store's own encoding (and its error for a None key)
            key_bytes = store.encode_key(key)
        if type(key) in _MEMO_KEY_TYPES:
            self._last_key, self._last_key_bytes = key, key_bytes
        return key_bytes

    def _serialized_store(self) -> RocksDBStore | None:
        """The store when its bytes are the changelog's too, else None (decided once)."""
        if self._encodes_once is None:
            store = self.data  # made once per table: kept, not looked up per read and write
            self._encodes_once = self._changelog_encodes_as_store(store)
            if self._encodes_once:
                self._same_bytes_store = cast(RocksDBStore, store)
                self._resolve_codecs(self._same_bytes_store)
                self._in_batches = batch_table.handles_table(self, store)
        return self._same_bytes_store

    def _resolve_codecs(self, store: RocksDBStore) -> None:
        """The store's codecs looked up once (`resolved_codecs`), when the store encodes with
        the app's serializers as streamapp's store does (its methods not overridden)."""
        cls = type(store)
        if (cls.encode_key, cls.encode_value, cls.decode_value) != (
            RocksDBStore.encode_key,
            RocksDBStore.encode_value,
            RocksDBStore.decode_value,
        ):
            return
        registry = self.app.serializers
        self._dump_key = resolved_codecs.dumper(
            registry, "key", store.key_type, store.key_serializer
        )
        self._dump_value = resolved_codecs.dumper(
            registry, "value", store.value_type, store.value_serializer
        )
        self._load_value = resolved_codecs.loader(
            registry, "value", store.value_type, store.value_serializer
        )

    def _changelog_encodes_as_store(self, store: Any) -> bool:
        if not isinstance(store, RocksDBStore) or self.schema is not None:
            return False
        schema = self.changelog_topic.schema
        # The changelog encodes with Schema.dumps_key/dumps_value, which call the same
        # registry as the store when the schema is Faust's own (no headers of its own).
        return type(schema) is Schema and (
            schema.key_type,
            schema.value_type,
            schema.key_serializer,
            schema.value_serializer,
        ) == (self.key_type, self.value_type, self.key_serializer, self.value_serializer)
