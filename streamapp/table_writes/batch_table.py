"""A table's reads and writes in a batch, with what a per-call read or write looks up looked up
once per batch.

A table read or write in an agent, through the store's per-call path (``get_bytes`` /
``set_bytes`` of `streamapp.runtime.stores.RocksDBStore`, Faust's rules), does per call:

- find the partition: ``current_event()`` (a context variable and a weak reference), its
  message's partition, the table's ``is_global`` and ``use_partitioner``, and for a write the
  table's ``partition_for_key`` once more; then the partition's handle;
- note the key in the store's key index (``key_index``: mode's ``LRUCache`` of
  ``table_key_index_size`` entries, key -> the partition it was last found or written in),
  on every write and on every read that finds the key;
- call the sensors: ``on_key_get`` / ``on_table_set`` through Faust's ``SensorDelegate`` to each
  sensor (Faust's ``Monitor`` adds one to the table's ``keys_retrieved`` or ``keys_updated``).

While `streamapp.batches` hands an agent a batch, Faust's current event is the batch's last
record from its start to its end (`batch_stream.set_current_event`), so the partition is the
same for every record of it. `BatchTable` holds one table's part of one batch:

- **the partition**, read off the current event once per batch, and for the batch's first write
  asked of the table's own ``partition_for_key`` once (its check that the source topic is
  co-partitioned with the changelog included; Faust's reads do not check it, nor do these);
- **the partition's handle**, looked up in the store's open handles per call (a dict lookup; a
  missing one is opened by the store's ``handle``): the agent may await inside a batch, and a
  rebalance may close a handle meanwhile, so a handle is never kept across calls;
- **the key index**, updated once per batch: the keys the batch read (and found) or wrote are
  noted in order, and go into the index in one update (``note_keys``) when the batch ends
  (sent or left unfinished) and before a deletion in the batch that takes the store's per-call
  path (``clear``). While the index has room for the batch's new keys it ends with the entries
  the per-call path leaves, in the same order: an assignment to a key the index holds does not
  move it, and neither does the update; new keys go last. A full index
  (``table_key_index_size``, 10,000 keys by default) can end with a few other old keys: the
  per-call path evicts the oldest key as each new one comes, and puts an evicted key back, as
  the newest, if the batch touches it again; the update evicts the oldest keys once, after all
  of the batch's. Either way it holds at most that many keys, the batch's among the newest.
  Who reads the index: the store's per-call deletion (it deletes a key in the indexed
  partition, or in every partition when the key is not indexed), hence the update before a
  deletion on that path (a deletion on this path deletes in the batch's partition: see below);
  and reads made without a current event (a web view, a timer), which take the index as a hint
  of where to look first and otherwise look in each partition. Such a read made by another task
  while the agent awaits inside a batch can find this batch's new keys not indexed yet, as it
  can find a key the index evicted: it finds them in their partition all the same. Reads and
  writes inside the batch never read the index.
- **the writes**, stored together: a write waits in the partition's pending writes (the
  store's, `streamapp.runtime.pending_writes`, one per partition, shared by every batch of it),
  a read in a batch looks there first, and the batch's end stores them in one rocksdict
  ``WriteBatch`` (the store's ``write_pending``), before its changelog records are sent
  (`batch_changelog.end`): one write to RocksDB's log per batch, not one per record (about
  3.3 µs of CPU a put against about 1.2 µs a key in batches of 16). A batch left unfinished
  drops its writes: it sends no changelog record either, and is processed again after the
  restart. Every other read or write of the table that goes to the store itself stores the
  pending writes first (`encode_once.Table`: a read or write outside a batch, in another task
  or by another agent; ``in`` outside a batch, iteration, ``len``, ``keys``, ``items``,
  ``values``, ``copy``, ``update``, ``clear``, a deletion outside a batch), so each sees every
  write made so far, as with per-call writes.
- **under exactly_once** the store is transactional (`streamapp.runtime.stores`): the
  partition's pending writes hold every write since its transaction last committed, and the
  commit stores them. The batch's writes join them as they are made; the batch notes the
  pending write each key it changes had before (its undo), so that its end can tell what the
  writes now weigh and note the batch's source partition (`finish`), and a batch left
  unfinished can put back what the earlier batches had pending (`discard`) instead of
  dropping their writes with its own.
- **the deletions**, with the writes: ``del table[key]`` and ``pop`` in a batch wait in the
  pending writes too (the key's value there is None), reads and ``in`` in the batch find the
  key gone, and the batch's end deletes it in the same write batch. The key is deleted in the
  batch's partition, the one its changelog record goes to and a recovery applies it in; the
  per-call deletion deletes it in every partition when the key index does not hold it (a key
  only another partition's store holds stays there, as it does after a recovery).
- **the offset**: the store's persisted offset is not in the write batch: it is the
  changelog offset of the batch's last record, known only at its delivery, and written then
  (`batch_changelog`), after the data it covers; a crash in between leaves a store whose data
  is ahead of its offset, and the changelog replay from the offset writes the same values
  again.
- **the sensors**, when each sensor of the app is Faust's own ``Monitor`` (its table sensors
  not overridden: they only count) and holds the table's ``TableState`` already: the states are
  looked up once per batch and counted per call, so ``keys_retrieved`` and ``keys_updated``
  are at every moment what Faust's calls would have made them. Any other sensor (a Prometheus,
  statsd or Datadog monitor, an app's own) is called per read and write by Faust's delegate,
  with the key and value, as before; so is a table the monitor has no state for yet (its first
  call makes it). A sensor added during a batch is counted from the next batch. (A read counts
  after its key is encoded, not before: a key that cannot be encoded raises uncounted.)

Other tables and stores keep the per-call path (`handles_table` is False, or `for_batch`
returns None): a store that is not streamapp's RocksDB store or whose per-call reads and writes
are overridden (``memory://``, a subclass), a global table, a table that partitions by key
(``use_partitioner``), a windowed table (its writes also note the window's expiry), a table
whose ``on_key_get`` is not Faust's, and every table outside a batch or in a batch whose
changelog records take Faust's path (`batch_changelog.begin` returned None).

Delete when Faust's table resolves a stream's partition once per event batch.
Tests: tests/unit/streamapp/table_writes/test_batch_table.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import faust
from faust.sensors import Monitor
from faust.sensors.monitor import TableState
from faust.types import TP

from streamapp.runtime.pending_writes import ABSENT
from streamapp.runtime.stores import RocksDBStore


def handles_table(table: Any, store: Any) -> bool:
    """True if ``table``'s reads and writes in a batch can take `BatchTable` (decided once per
    table: nothing it depends on changes while the table lives)."""
    cls = type(store)
    return (
        isinstance(store, RocksDBStore)
        and (cls.get_bytes, cls.set_bytes, cls.read, cls.handle)
        == (RocksDBStore.get_bytes, RocksDBStore.set_bytes, RocksDBStore.read, RocksDBStore.handle)
        and not table.is_global
        and not table.use_partitioner
        and table.window is None
        and type(table).on_key_get is faust.Table.on_key_get
    )


def for_batch(table: Any, store: Any) -> BatchTable | None:
    """``table``'s part of the batch being processed (it must be one `handles_table` takes);
    None when no current event gives the batch's partition."""
    event = faust.current_event()
    if event is None:
        return None
    # What the store's per-call reads and writes read; a write also checks, once per batch,
    # that the source topic is co-partitioned with the changelog (the table's
    # partition_for_key).
    message = event.message
    return BatchTable(table, store, message.partition, _table_states(table), message.tp)


def _table_states(table: Any) -> tuple[TableState, ...] | None:
    """The ``TableState`` of ``table`` in each of the app's sensors, when every sensor is Faust's
    ``Monitor`` counting as Faust's does and has one; else None (Faust's calls per read and
    write)."""
    states: list[TableState] = []
    for sensor in table.app.sensors:
        cls = type(sensor)
        if not isinstance(sensor, Monitor) or (
            cls.on_table_get,
            cls.on_table_set,
        ) != (Monitor.on_table_get, Monitor.on_table_set):
            return None
        state = sensor.tables.get(table.name)
        if state is None:
            return None  # Faust's first call makes it
        states.append(state)
    return tuple(states)


class BatchTable:
    """One table's reads and writes of bytes during one batch (see the module)."""

    __slots__ = (
        "_indexed",
        "handles",
        "partition",
        "pending",
        "source",
        "states",
        "store",
        "table",
        "undo",
        "write_partition",
    )

    def __init__(
        self,
        table: Any,
        store: Any,
        partition: int,
        states: tuple[TableState, ...] | None,
        source: TP | None = None,
    ) -> None:
        self.table = table
        self.store = store
        self.partition = partition
        #: The table's ``partition_for_key`` (Faust's, checks included), once a write asked.
        self.write_partition: int | None = None
        self.handles: Mapping[int, Any] = store.open_handles
        #: The monitors' states of the table, counted here; None: Faust's sensor calls.
        self.states = states
        #: Keys found or written in this batch, in the order first noted, for the key index.
        self._indexed: dict[bytes, None] = {}
        #: The partition's writes not in its store yet (the store's `PendingWrites`, shared with
        #: every batch of the same store and partition; its plain dict, per record).
        self.pending: dict[bytes, bytes | None] = store.pending(partition).writes
        #: The source partition of the batch's records.
        self.source = source
        #: A transactional store's: each key the batch changed -> its pending write before
        #: (`ABSENT`: none). None for a store that stores the batch's writes as it ends.
        self.undo: dict[bytes, Any] | None = {} if store.transactional else None

    def _db(self) -> Any:
        """The partition's open handle; a missing one (closed during an await in the batch, by
        a rebalance) opened again, as the per-call path would."""
        return self.store.handle(self.partition)

    def get(self, key: Any, key_bytes: bytes) -> bytes | None:
        """The table's ``on_key_get`` (its sensors), then the store's read of ``key_bytes``
        in the batch's partition."""
        states = self.states
        if states is None:
            self.table.on_key_get(key)
        else:
            for state in states:
                state.keys_retrieved += 1
        value = self._read(key_bytes)
        if value is not None:
            self._indexed[key_bytes] = None
        return value

    def contains(self, key_bytes: bytes) -> bool:
        """Whether ``key_bytes`` has a value in the batch's partition, its pending writes
        first."""
        return self._read(key_bytes) is not None

    def _read(self, key_bytes: bytes) -> bytes | None:
        """``key_bytes``'s value in the batch's partition: its pending write or deletion (made
        in a batch, not in the store yet), else the store's."""
        pending = self.pending
        if key_bytes in pending:
            return pending[key_bytes]
        db = self.handles.get(self.partition)  # the store's handle(), without the call
        value: bytes | None = (self._db() if db is None else db).get(key_bytes)
        return value

    def delete(self, key_bytes: bytes) -> None:
        """The store's deletion of ``key_bytes``, in the batch's partition: it waits with the
        partition's pending writes."""
        undo = self.undo
        if undo is not None and key_bytes not in undo:
            undo[key_bytes] = self.pending.get(key_bytes, ABSENT)
        self.pending[key_bytes] = None

    def set(self, key: Any, value: Any, key_bytes: bytes, value_bytes: bytes | None) -> None:
        """What Faust's ``on_key_set`` does after the changelog record (the sensors; the key's
        ttl is a windowed table's, which this does not take), then the store's write."""
        states = self.states
        if states is None:
            self.table.app.sensors.on_table_set(self.table, key, value)
        else:
            for state in states:
                state.keys_updated += 1
        self._indexed[key_bytes] = None
        if value_bytes is None:  # as the store's put would take it (and fail), at once
            self.store.write_pending()
            self._db().put(key_bytes, value_bytes)
        else:
            undo = self.undo
            if undo is not None and key_bytes not in undo:
                undo[key_bytes] = self.pending.get(key_bytes, ABSENT)
            self.pending[key_bytes] = value_bytes

    def finish(self) -> None:
        """The batch ended: its writes are stored, or under exactly_once wait for the
        transaction of its source partition with the earlier ones (`PendingWrites.account`)."""
        undo = self.undo
        if undo is None:
            self.store.write_pending()
            return
        if undo:
            self.undo = {}
            pending = self.store.pending(self.partition)
            pending.account(undo)
            if self.source is not None:
                pending.sources.add(self.source)

    def discard(self) -> None:
        """The batch was left unfinished: its partition's writes are dropped, not stored (its
        changelog records are not sent either). Under exactly_once only its own: the earlier
        batches' writes, waiting for their transaction, are put back as they were."""
        undo = self.undo
        if undo is None:
            self.pending.clear()
            return
        pending = self.pending
        for key, old in undo.items():
            if old is ABSENT:
                pending.pop(key, None)
            else:
                pending[key] = old
        undo.clear()

    def index_keys(self) -> None:
        """Put the keys noted so far in the store's key index (see the module)."""
        indexed = self._indexed
        if indexed:
            self._indexed = {}
            self.store.note_keys(indexed, self.partition)
