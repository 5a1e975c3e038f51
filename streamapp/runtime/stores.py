"""streamapp's RocksDB store: a table's partitions in rocksdict, loaded by Faust through its
``faust.stores`` entry point.

Faust picks a table's store by the scheme of its store URL (``App(store=...)``, or a table's
own ``store=``). streamapp's store is registered as ``streamapp-rocksdb`` (pyproject.toml), a
name of its own: ``rocksdb://`` stays Faust's store for every other app in the process.
`streamapp.App` uses this store by default, and takes a ``rocksdb://`` given to it, or to one of
its tables, as this store (`own_store_url`); ``memory://`` stays Faust's.

On disk it is Faust's RocksDB store, so data dirs written by either open unchanged: one raw-mode
rocksdict per table partition at ``<tabledir>/<table>-<partition>.db``, the offset of the last
changelog record the partition holds under Faust's key ``__faust\\0offset__``, and the options
Faust opens it with (``faust.stores.rocksdb.RocksDBOptions``, from the table's ``options``).

What differs from Faust's store:

- a partition's data and its persisted offset are written in one rocksdict write batch
  (`write`, `apply_changelog_batch`): the offset never runs ahead of the data it covers;
- a batch agent's writes wait in the partition's pending writes, which reads see, and are stored
  in one write batch as the batch ends (`pending`, `write_pending`;
  `streamapp.runtime.pending_writes`);
- under exactly_once the store is transactional: every write waits in the partition's pending
  writes until the transactions that carried its changelog records have committed, and is then
  stored with the changelog offset it reaches in one write batch (`commit_pending`, called by
  the table manager at each commit); an aborted transaction's writes, and a revoked
  partition's uncommitted ones, are dropped (`drop_pending`). The store on disk so holds
  committed writes only, and its offset is the last committed one: after a crash, recovery
  replays only the changelog's tail past it, as at-least-once;
- a revoked partition's handle is closed off the event loop, and a rebalance awaits those closes
  before it opens anything (`streamapp.runtime.store_handles`);
- the offset of each open handle is noted as it is written, for the join metadata, readable
  from the consumer thread without touching a handle (`open_offsets`);
- one partition's handle can be closed and forgotten (`close_partition`), for a damaged store
  set aside while the worker runs (`tables.store_guard`).

Used as a mapping (``table[key]``, Faust's own table code), it behaves as Faust's: in a stream,
the partition of the current event (`streamapp.runtime.store_mapping`).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import weakref
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future
from itertools import repeat
from pathlib import Path
from typing import Any

from faust.exceptions import ImproperlyConfigured
from faust.stores.base import Store
from faust.stores.rocksdb import RocksDBOptions
from faust.types import TP, AppT, CollectionT, EventT
from mode.utils.collections import LRUCache
from rocksdict import AccessType, Rdict, ReadOptions
from yarl import URL

from streamapp.runtime.pending_writes import (
    OFFSET_KEY,
    PendingWrites,
    decode_offset,
    encode_offset,
    write_batch,
)
from streamapp.runtime.store_handles import PartitionHandles
from streamapp.runtime.store_mapping import TableMapping

logger = logging.getLogger(__name__)

#: The ``faust.stores`` entry point's name of `RocksDBStore` (pyproject.toml).
STORE_SCHEME = "streamapp-rocksdb"
STORE_URL = f"{STORE_SCHEME}://"

#: How often, and how far apart, an assigned partition's open is tried while another process
#: holds its lock (Faust's figures).
OPEN_RETRIES = 30
OPEN_RETRY_DELAY_S = 1.0

#: id(table) -> its store, for `store_of` (a table is a mapping: it is no dict key of its own).
_stores: dict[int, weakref.ref[RocksDBStore]] = {}


def own_store_url(url: str | URL) -> str | URL:
    """``url``, with a ``rocksdb:`` scheme made streamapp's store's (path kept); any other as
    it is."""
    text = str(url)
    if URL(text).scheme == "rocksdb":
        return STORE_SCHEME + text[len("rocksdb") :]
    return url


def store_of(table: Any) -> RocksDBStore | None:
    """The table's streamapp store, if it was created (never creates one: safe from any
    thread). A table of sets keeps its sets in one."""
    ref = _stores.get(id(table))
    store = None if ref is None else ref()
    return store if store is not None and store.table is table else None


def open_offsets(tables: Iterable[Any]) -> dict[tuple[str, int], int | None]:
    """(table name, partition) -> persisted offset (None: none yet) of every partition of
    ``tables`` whose store has a handle open here; safe from the consumer thread."""
    found: dict[tuple[str, int], int | None] = {}
    for table in tables:
        store = store_of(table)
        if store is not None:
            for partition, offset in store.open_offsets().items():
                found[(table.name, partition)] = offset
    return found


class RocksDBStore(TableMapping, Store[Any, Any]):
    """A table's partitions in rocksdict (see the module); Faust's table code uses it as a
    mapping (`TableMapping`)."""

    offset_key = OFFSET_KEY

    def __init__(
        self,
        url: str | URL,
        app: AppT,
        table: CollectionT,
        *,
        key_index_size: int | None = None,
        options: Mapping[str, Any] | None = None,
        read_only: bool | None = False,
        driver: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(url, app, table, options=options, **kwargs)
        if not self.url.path:
            self.url /= self.table_name
        rocksdb_options = dict(options or {})  # the table's own stay as they are
        # Accepted as Faust's store accepts it; rocksdict opens every store read-write.
        self.read_only = rocksdb_options.pop("read_only", read_only)
        driver = rocksdb_options.pop("driver", driver)
        if driver not in (None, "rocksdict"):
            raise ImproperlyConfigured(
                f"table {self.table_name}: streamapp's RocksDB store runs on rocksdict, not "
                f"{driver!r}: remove the table's 'driver' option"
            )
        self.rocksdb_options = RocksDBOptions(**rocksdb_options, use_rocksdict=True)
        self.key_index_size = key_index_size or app.conf.table_key_index_size
        #: Key bytes -> the partition it was last found or written in: where a read without
        #: an event looks first (mode's LRU cache, as Faust's store keeps it).
        self.key_index: LRUCache[bytes, int] = LRUCache(limit=self.key_index_size)
        self.handles = PartitionHandles(self.table_name, self._open_partition)
        #: Partition -> its writes not stored yet (`pending`).
        self.pending_writes: dict[int, PendingWrites] = {}
        #: `transactional`, once the worker runs (None: not asked yet, or not in a worker).
        self._transactional: bool | None = None
        self.db_lock = asyncio.Lock()
        #: False once a rebalance begins: an earlier one stops opening its assigned partitions.
        self.opening_assigned = False
        _stores[id(table)] = weakref.ref(self, _forget_store(id(table)))

    @property
    def transactional(self) -> bool:
        """Whether writes wait for their transactions' commit (see the module): under
        exactly_once, in a worker (Faust runs transactions only there)."""
        found = self._transactional
        if found is None:
            app = self.app
            found = bool(app.in_transaction)
            if app.in_worker:  # final from here on
                self._transactional = found
        return found

    # -- Where the partitions are (Faust's layout) --

    @property
    def path(self) -> Path:
        """The directory of every table's stores (the app's ``tabledir``)."""
        return Path(self.app.conf.tabledir)

    @property
    def basename(self) -> Path:
        """The table's name, the prefix of its partitions' store directories."""
        return Path(self.url.path)

    def partition_path(self, partition: int) -> Path:
        """Where the store of ``partition`` is: ``<tabledir>/<table>-<partition>.db``."""
        prefix = self.path / self.basename
        return prefix.with_name(f"{prefix.name}-{partition}.db")

    def _open_partition(self, partition: int) -> Rdict:
        """Open (creating if missing) the store of ``partition`` as Faust's rocksdict path does."""
        path = self.partition_path(partition)
        path.parent.mkdir(parents=True, exist_ok=True)
        options = self.rocksdb_options
        access = (
            AccessType.read_write() if options.ttl is None else AccessType.with_ttl(options.ttl)
        )
        db = Rdict(str(path), options=options.as_options(), access_type=access)
        db.set_read_options(ReadOptions())
        return db

    # -- One partition: streamapp's own code reads and writes through these --

    def handle(self, partition: int) -> Rdict:
        """The partition's open rocksdict handle (opened if it is not). Do not keep it across
        an await: a rebalance may close it meanwhile."""
        return self.handles.get(partition)

    @property
    def open_handles(self) -> Mapping[int, Rdict]:
        """Partition -> open handle (read only: `handle` opens, a revocation closes)."""
        return self.handles.open

    def open_partitions(self) -> set[int]:
        """The partitions whose handle is open here."""
        return set(self.handles.open)

    def open_offsets(self) -> dict[int, int | None]:
        """Partition -> persisted offset of each handle open here; safe from any thread."""
        return self.handles.open_offsets()

    def pending(self, partition: int) -> PendingWrites:
        """The partition's writes not stored yet (the same object for as long as the store
        lives): a read of the partition sees them, `write_pending` stores them."""
        writes = self.pending_writes.get(partition)
        if writes is None:
            writes = self.pending_writes[partition] = PendingWrites()
        return writes

    def read(self, partition: int, key: bytes) -> bytes | None:
        """The value bytes of ``key`` in ``partition``: its pending write, else the store's."""
        pending = self.pending_writes.get(partition)
        if pending is not None and key in pending.writes:
            return pending.writes[key]
        db = self.handles.open.get(partition)
        value: bytes | None = (self.handles.get(partition) if db is None else db).get(key)
        return value

    def write(
        self, partition: int, writes: Mapping[bytes, bytes | None], offset: int | None = None
    ) -> None:
        """Store ``writes`` (key -> value bytes, None a deletion) in ``partition`` and, when
        given, its persisted changelog ``offset``, in one rocksdict write batch. The
        partition's pending writes are not part of it."""
        if not writes and offset is None:
            return
        db = self.handle(partition)
        if offset is None and len(writes) == 1:  # a put costs less than a write batch of one
            ((key, value),) = writes.items()
            if value is None:
                db.delete(key)
            else:
                db.put(key, value)
        else:
            db.write(write_batch(writes, offset))
        if offset is not None:
            self.handles.note_offset(partition, offset)

    def write_pending(self, partition: int | None = None) -> None:
        """Store the pending writes of ``partition`` (of every partition when None), one write
        batch per partition. A transactional store stores none here: its pending writes wait
        for their transactions' commit (`commit_pending`)."""
        if self.transactional:
            return
        if partition is not None:
            pending = self.pending_writes.get(partition)
            if pending is not None and pending.writes:
                self.write(partition, pending.writes)
                pending.drop()
            return
        for each, pending in self.pending_writes.items():
            if pending.writes:
                self.write(each, pending.writes)
                pending.drop()

    # -- Transactional writes (exactly_once) --

    def stage(self, partition: int, key: bytes, value: bytes | None, source: TP | None) -> None:
        """``value`` for ``key`` (None: its deletion) in ``partition``, made by a record of
        ``source``, waiting for that record's transaction to commit."""
        pending = self.pending(partition)
        pending.stage(key, value)
        if source is not None:
            pending.sources.add(source)

    def committed_partitions(self, committed: set[TP]) -> list[int]:
        """The partitions whose pending writes were all made by records of ``committed``
        source partitions (whose transactions just committed)."""
        return [
            partition
            for partition, pending in self.pending_writes.items()
            if pending.writes and pending.sources <= committed
        ]

    def commit_pending(self, partition: int, offset: int | None) -> None:
        """Store the partition's pending writes and, when given, the changelog ``offset`` they
        reach, in one write batch: the transactions that made them have committed."""
        pending = self.pending_writes.get(partition)
        self.write(partition, {} if pending is None else pending.writes, offset)
        if pending is not None:
            pending.drop()

    def drop_pending(self, partitions: Iterable[int]) -> int:
        """Forget the pending writes of ``partitions`` (their transactions will not commit
        here); returns how many writes were dropped."""
        dropped = 0
        for partition in partitions:
            pending = self.pending_writes.get(partition)
            if pending is not None:
                dropped += len(pending)
                pending.drop()
        return dropped

    def pending_partitions(self) -> dict[int, set[TP]]:
        """Partition -> the source partitions that made its pending writes, for each partition
        that has some."""
        return {p: set(w.sources) for p, w in self.pending_writes.items() if w.writes}

    def pending_bytes(self) -> int:
        """About the memory the pending writes of every partition take."""
        return sum(pending.size for pending in self.pending_writes.values())

    def items_of(self, partition: int) -> Iterator[tuple[bytes, bytes]]:
        """Every key and value bytes stored in ``partition`` (its pending writes seen; the
        persisted offset left out), opening its handle if needed."""
        found = self.pending_writes.get(partition)
        pending: Mapping[bytes, bytes | None] = {} if found is None else found.writes
        # items(), not iteration: a raw-mode Rdict iterates by index lookups, which it refuses.
        for key, value in self.handle(partition).items():
            if key != OFFSET_KEY and key not in pending:
                yield key, value  # type: ignore[misc]  # raw mode: bytes
        for key, written in list(pending.items()):
            if written is not None:
                yield key, written

    def keys_of(self, partition: int) -> Iterator[bytes]:
        """Every key stored in ``partition`` (see `items_of`)."""
        for key, _ in self.items_of(partition):
            yield key

    def note_keys(self, keys: Iterable[bytes], partition: int) -> None:
        """``keys`` were found or written in ``partition``: the key index says so, in one
        update (new keys go last; keys it holds keep their place)."""
        self.key_index.update(zip(keys, repeat(partition)))

    def pending_close(self, partition: int) -> Future[None] | None:
        """The close of the partition's revoked handle, while it is under way."""
        return self.handles.closing.get(partition)

    def close_partition(self, partition: int) -> None:
        """Close the partition's handle (if open) and forget it, and empty the key index: the
        store is about to be set aside, and the next use creates it afresh. The index is
        emptied whole: it costs a lookup per key afterwards, never a wrong answer."""
        self.handles.close(partition)
        self.key_index.clear()

    # -- Faust's StoreT --

    def persisted_offset(self, tp: TP) -> int | None:
        """The offset of the last changelog record the partition's store holds."""
        return decode_offset(self.handle(tp.partition).get(OFFSET_KEY))

    def set_persisted_offset(self, tp: TP, offset: int) -> None:
        """The partition's store holds its changelog up to ``offset`` (its data is written).
        A transactional store whose partition has writes pending keeps its offset: the offset
        goes with them (`commit_pending`), never ahead of them."""
        pending = self.pending_writes.get(tp.partition)
        if self.transactional and pending is not None and pending.writes:
            return
        self.handle(tp.partition).put(OFFSET_KEY, encode_offset(offset))
        self.handles.note_offset(tp.partition, offset)

    def apply_changelog_batch(
        self, batch: Iterable[EventT[Any]], to_key: Any = None, to_value: Any = None
    ) -> None:
        """Store changelog records as they are (raw bytes), each partition's with the offset of
        its last record in one write batch."""
        writes: dict[int, dict[bytes, bytes | None]] = {}
        offsets: dict[int, int] = {}
        for event in batch:
            message = event.message
            if message.key is None:
                raise TypeError(f"Changelog entry is missing key: {message}")
            partition = message.partition
            writes.setdefault(partition, {})[message.key] = message.value
            offsets[partition] = max(message.offset, offsets.get(partition, -1))
        for partition, offset in offsets.items():
            self.write(partition, writes[partition], offset)

    async def need_active_standby_for(self, tp: TP) -> bool:
        """False when another process holds the partition's store (its lock)."""
        try:
            self.handle(tp.partition)
        except Exception as exc:  # rocksdict raises plain Exception
            if "lock" not in repr(exc):
                raise
            return False
        return True

    def reset_state(self) -> None:
        """Remove the table's stores from disk (its changelog in Kafka stays as it is)."""
        self.handles.close_all()
        self.key_index.clear()
        for pending in self.pending_writes.values():
            pending.drop()
        for path in self.path.glob(f"{self.basename.name}-*.db"):
            if path.name[len(self.basename.name) + 1 : -3].isdigit():
                shutil.rmtree(path, ignore_errors=True)

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        """Give up the revoked partitions' handles (closed off the event loop, awaited with the
        loop running), then open the newly assigned active ones."""
        self.opening_assigned = False
        async with self.db_lock:
            self.revoke_partitions(self.table, revoked)
            closes = self.handles.closes_under_way()
            if closes:
                await asyncio.wait([asyncio.wrap_future(f) for f in closes])
            await self.assign_partitions(self.table, newly_assigned, generation_id)

    def revoke_partitions(self, table: CollectionT, tps: Iterable[TP]) -> None:
        """Give up the handles of the table's changelog partitions in ``tps``: each is closed
        on the closer thread; the store on disk stays."""
        topics = table.changelog_topic.topics
        self.handles.release(tp.partition for tp in tps if tp.topic in topics)

    async def assign_partitions(
        self, table: CollectionT, tps: Iterable[TP], generation_id: int = 0
    ) -> None:
        """Open the handles of the table's active changelog partitions in ``tps`` (standbys
        open as recovery reaches them)."""
        self.opening_assigned = True
        standbys = self.app.assignor.assigned_standbys()
        topics = table.changelog_topic.topics
        for tp in tps:
            if tp.topic in topics and tp not in standbys and self.opening_assigned:
                await self._open_assigned(tp.partition, generation_id)
                await asyncio.sleep(0)

    async def _open_assigned(self, partition: int, generation_id: int) -> None:
        """Open an assigned partition, waiting while another process holds its lock (a worker
        that had it is still stopping), as Faust does."""
        for attempt in range(OPEN_RETRIES):
            try:
                logger.debug(
                    "opening partition %d of %s for generation %d",
                    partition,
                    self.table_name,
                    generation_id,
                )
                self.handle(partition)
                return
            except Exception as exc:  # rocksdict raises plain Exception
                if attempt == OPEN_RETRIES - 1 or "lock" not in repr(exc):
                    logger.warning(
                        "streamapp: store %s partition %d could not be opened: %r",
                        self.table_name,
                        partition,
                        exc,
                    )
                    self.handles.close_all()  # every lock released, then the worker crashes
                    raise
                logger.info(
                    "streamapp: store %s partition %d is locked; retrying in %.0f s",
                    self.table_name,
                    partition,
                    OPEN_RETRY_DELAY_S,
                )
                if generation_id != self.app.consumer_generation_id:
                    logger.info(
                        "streamapp: rebalanced again: store %s partition %d is left closed",
                        self.table_name,
                        partition,
                    )
                    return
                await self.sleep(OPEN_RETRY_DELAY_S)

    async def on_stop(self) -> None:
        logger.debug("streamapp: closing the stores of table %s", self.table_name)
        self.handles.close_all()

    async def backup_partition(
        self, tp: TP | int, flush: bool = True, purge: bool = False, keep: int = 1
    ) -> None:
        raise NotImplementedError("Backups not supported in rocksdict yet")

    def restore_backup(self, tp: TP | int, latest: bool = True, backup_id: int = 0) -> None:
        raise NotImplementedError("Backup restoration not supported in rocksdict yet")


def _forget_store(table_id: int) -> Any:
    def forget(ref: weakref.ref[RocksDBStore]) -> None:
        if _stores.get(table_id) is ref:
            del _stores[table_id]

    return forget


class OnStreamappStore:
    """A table mixin: the table's store is streamapp's RocksDB store when its URL, or the app's
    ``store`` setting, names ``rocksdb://`` (`own_store_url`); any other store is as given."""

    def __init__(
        self, app: AppT, *, store: str | URL | None = None, name: str | None = None, **kwargs: Any
    ) -> None:
        # The app's setting is read here, not left to Faust: its APP_STORE variable wins over
        # what the App was given.
        url = own_store_url(store or app.conf.store)
        if name and str(url) in (STORE_URL, f"{STORE_SCHEME}:"):
            # The table's name as the path, which the store would add: Faust takes a URL with
            # neither host nor path for none at all, and falls back to the app's store.
            url = URL(STORE_URL) / name
        super().__init__(app, store=url, name=name, **kwargs)  # type: ignore[call-arg]
