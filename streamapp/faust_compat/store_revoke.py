"""Faust's RocksDB store gives up revoked partitions without a full garbage collection.

Faust's ``Store.revoke_partitions`` (faust-streaming 0.15.3) drops the handles of the revoked
partitions and then runs ``gc.collect()``: once per table at every rebalance, whether it
dropped a handle or not. A full collection of a worker's heap holds the GIL, so it stops the
event loop and the consumer thread with it, and with them every partition the worker keeps:
0.15-0.41 s per table on the rebalance benchmark's busy 2-core machine, on every worker, in
every step (an incremental rebalance that revokes nothing paid it too), which made it the
largest stop of the partitions a cooperative rebalance does not move.

The collection is there so that a handle some reference cycle still holds is freed, and with it
the partition's RocksDB ``LOCK``, before this process opens that store again (a standby of the
partition, or the partition given back). Here each revoked handle is taken out of the store
as Faust does and dropped: with no other reference (the usual case) its database closes at
once, by reference counting. Only when an open then finds the lock still held by this very
process (a cycle kept a handle alive) does the collector run, once, and the open is tried
again: Faust's guarantee, paid when it is needed.

Faust private names this module uses, checked at import with the others
(`streamapp.faust_compat.PRIVATE_NAMES`): ``faust.stores.rocksdb.Store._dbs`` (the open
handles, one per partition) and ``._open_for_partition`` (where every open of a partition's
store goes through).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Set
from typing import Any

from faust.stores.rocksdb import Store as RocksDBStore
from faust.types import TP
from faust.types.tables import CollectionT

logger = logging.getLogger(__name__)

#: What RocksDB says when the lock of a store is held by the process trying to open it
#: (``IO error: lock hold by current process, acquire time ...``).
LOCK_HELD_HERE = "lock hold by current process"


def revoke_partitions(self: Any, table: CollectionT, tps: Set[TP]) -> None:
    """Faust's, without the collection: the handles of the revoked partitions are dropped."""
    topics = table.changelog_topic.topics
    for tp in tps:
        if tp.topic in topics:
            db = self._dbs.pop(tp.partition, None)
            if db is not None:
                self.logger.info(f"closing db {tp.topic} partition {tp.partition}")
                del db  # the last reference, as a rule: RocksDB closes and unlocks here


def _open_for_partition(self: Any, partition: int) -> Any:
    try:
        return _original_open_for_partition(self, partition)
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
    gc.collect()
    return _original_open_for_partition(self, partition)


_original_open_for_partition: Callable[[Any, int], Any] = RocksDBStore._open_for_partition
_installed = False


def install() -> None:
    """Patch Faust's RocksDB store class for this process (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    RocksDBStore.revoke_partitions = revoke_partitions  # type: ignore[method-assign]
    RocksDBStore._open_for_partition = _open_for_partition  # type: ignore[method-assign]
