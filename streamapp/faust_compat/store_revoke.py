"""Faust's RocksDB store gives up revoked partitions without stopping the event loop.

Faust's ``Store.revoke_partitions`` (faust-streaming 0.15.3) drops the handles of the revoked
partitions and then runs ``gc.collect()``: once per table at every rebalance, whether it
dropped a handle or not. A full collection of a worker's heap holds the GIL, so it stops the
event loop and the consumer thread with it, and with them every partition the worker keeps:
0.15-0.41 s per table on the rebalance benchmark's busy 2-core machine, on every worker, in
every step (an incremental rebalance that revokes nothing paid it too), which made it the
largest stop of the partitions a cooperative rebalance does not move. Dropping the last
reference to a handle closes its RocksDB there and then, GIL held: up to 0.6 s on the same
benchmark for a partition given up in a scale-out.

The collection is there so that a handle some reference cycle still holds is freed, and with it
the partition's RocksDB ``LOCK``, before this process opens that store again (a standby of the
partition, or the partition given back). Here:

- each revoked handle is taken out of the store as Faust does, and closed (rocksdict's
  ``close``: a flush of what is in memory, then the release) on a thread of its own, which
  RocksDB runs without the GIL: the event loop keeps processing the partitions kept;
- the store's rebalance step (``on_rebalance``, Faust's otherwise) awaits those closes before
  it opens anything, so the next open of a revoked store finds it unlocked; an open that comes
  another way while the close is under way waits for it;
- no collection runs, unless an open finds the lock still held by this very process (a cycle
  kept a handle alive): then the collector runs, once, over the whole heap (the objects the
  worker froze at startup too, `streamapp.startup_heap.collect_all`), and the open is tried
  again. Faust's guarantee, paid only when it is needed.

Faust private names this module uses, checked at import with the others
(`streamapp.faust_compat.PRIVATE_NAMES`): ``faust.stores.rocksdb.Store._dbs`` (the open
handles, one per partition) and ``._open_for_partition`` (where every open of a partition's
store goes through).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Set
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from faust.stores.rocksdb import Store as RocksDBStore
from faust.types import TP
from faust.types.tables import CollectionT

from streamapp import startup_heap
from streamapp.faust_compat import store_offsets
from streamapp.faust_compat.once import once

logger = logging.getLogger(__name__)

#: What RocksDB says when the lock of a store is held by the process trying to open it
#: (``IO error: lock hold by current process, acquire time ...``).
LOCK_HELD_HERE = "lock hold by current process"

#: One thread closes every revoked store, in the order they were revoked. Its pending closes
#: are finished before the interpreter exits (concurrent.futures joins its threads then).
_closer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamapp-store-close")


def closing(store: Any) -> dict[int, Future[None]]:
    """The store's closes under way: partition -> its close (dropped once done)."""
    found: dict[int, Future[None]] | None = store.__dict__.get("streamapp_closing")
    if found is None:
        found = store.__dict__["streamapp_closing"] = {}
    return found


def _close(db: Any, name: str) -> None:
    try:
        db.close()
    except Exception:
        # The handle goes when it is collected; an open before then retries (see the module).
        logger.exception("streamapp: closing the store %s failed", name)


def revoke_partitions(self: Any, table: CollectionT, tps: Set[TP]) -> None:
    """Faust's, without the collection: each revoked handle is closed on the closer thread."""
    topics = table.changelog_topic.topics
    pending = closing(self)
    for tp in tps:
        if tp.topic not in topics:
            continue
        db = self._dbs.pop(tp.partition, None)
        if db is None:
            continue
        self.logger.info(f"closing db {tp.topic} partition {tp.partition}")
        future = _closer.submit(_close, db, f"{table.name} partition {tp.partition}")
        del db  # the closer holds it now
        pending[tp.partition] = future
        future.add_done_callback(_forget(pending, tp.partition))


def _forget(pending: dict[int, Future[None]], partition: int) -> Callable[[Future[None]], None]:
    def forget(done: Future[None]) -> None:
        if pending.get(partition) is done:
            del pending[partition]

    return forget


async def on_rebalance(
    self: Any,
    assigned: Set[TP],
    revoked: Set[TP],
    newly_assigned: Set[TP],
    generation_id: int = 0,
) -> None:
    """Faust's, awaiting the revoked stores' closes (the loop runs on) before any open."""
    self.rebalance_ack = False
    async with self.db_lock:
        self.revoke_partitions(self.table, revoked)
        closes = list(closing(self).values())
        if closes:
            await asyncio.wait([asyncio.wrap_future(f) for f in closes])
        await self.assign_partitions(self.table, newly_assigned, generation_id)


def _open_for_partition(self: Any, partition: int) -> Any:
    under_way = closing(self).get(partition)
    if under_way is not None:
        # Opened before its close ended (not by the rebalance step, which awaits it): its
        # lock is held until then.
        under_way.result()
    try:
        db = _original_open_for_partition(self, partition)
    except Exception as exc:  # rocksdict raises plain Exception
        if LOCK_HELD_HERE not in str(exc):
            raise
        # A handle of this store, dropped by a revocation, is still alive in a reference cycle.
        logger.info(
            "streamapp: store %s partition %d is still locked by this worker; collecting the "
            "handle a reference cycle kept alive, then opening it again",
            self.table.name,
            partition,
        )
        startup_heap.collect_all()
        db = _original_open_for_partition(self, partition)
    # Every open comes here: the join metadata reads this handle's offset from what is noted.
    store_offsets.opened(self, partition, db)
    return db


_original_open_for_partition: Callable[[Any, int], Any] = RocksDBStore._open_for_partition


@once
def install() -> None:
    """Patch Faust's RocksDB store class for this process."""
    RocksDBStore.revoke_partitions = revoke_partitions  # type: ignore[method-assign]
    RocksDBStore.on_rebalance = on_rebalance  # type: ignore[method-assign]
    RocksDBStore._open_for_partition = _open_for_partition  # type: ignore[method-assign]
