"""The open rocksdict handles of one table's store, one per partition: opened on first use,
closed off the event loop when given up, and the persisted offset of each noted as it goes.

Closing off the event loop. Dropping the last reference to a handle closes its RocksDB there
and then, GIL held: up to 0.6 s on the rebalance benchmark's busy 2-core machine for a
partition given up in a scale-out, and every partition the worker kept stopped with it. Faust's
store also ran a full garbage collection at every revocation (0.15-0.41 s per table on the same
benchmark, whether it dropped a handle or not), so that a handle some reference cycle still held
was freed, and with it the partition's RocksDB ``LOCK``, before the store opens again. Here:

- a handle given up (`release`) leaves the open handles at once and is closed (rocksdict's
  ``close``: a flush of what is in memory, then the release of the lock) on a thread of its
  own, which RocksDB runs without the GIL: the event loop keeps processing the partitions kept;
- the store's rebalance step awaits those closes (`closes_under_way`) before it opens anything,
  so the next open of a released store finds it unlocked; an open that comes another way while
  the close is under way waits for it;
- no collection runs, unless an open finds the lock still held by this very process (a cycle
  kept a handle alive): then the collector runs once, over the whole heap (the objects the
  worker froze at startup too, `streamapp.startup_heap.collect_all`), and the open is tried
  again. Faust's guarantee, paid only when it is needed.

The offsets. Each join's metadata reports the offset up to which every local store has applied
its changelog (`tables.inventory`). Read from disk, that is a read-only RocksDB open of each
store: tens of ms apiece on a busy machine, on aiokafka's consumer thread, at every join. For a
store open here, the offset is known already: an open notes the offset the handle holds, and
each write of the offset notes it (`note_offset`). `open_offsets` copies the noted offsets in one
step (a C-level copy, under the GIL) and never touches a handle, so it is safe from the
consumer thread while the event loop writes; an offset is noted only while its handle is open.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress

from rocksdict import Rdict

from streamapp import startup_heap
from streamapp.runtime.pending_writes import OFFSET_KEY, decode_offset

logger = logging.getLogger(__name__)

#: What RocksDB says when the lock of a store is held by the process trying to open it
#: (``IO error: lock hold by current process, acquire time ...``).
LOCK_HELD_HERE = "lock hold by current process"

#: One thread closes every released handle of every store, in the order they were released.
#: Its pending closes are finished before the interpreter exits (concurrent.futures joins its
#: threads then).
closer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamapp-store-close")


def _close(db: Rdict, name: str) -> None:
    try:
        db.close()
    except Exception:
        # The handle goes when it is collected; an open before then retries (see the module).
        logger.exception("streamapp: closing the store %s failed", name)


class PartitionHandles:
    """The open handles of one store by partition, their noted offsets and their closes under
    way (see the module)."""

    def __init__(self, name: str, open_db: Callable[[int], Rdict]) -> None:
        #: The store's name in log lines (its table's).
        self.name = name
        self._open_db = open_db
        #: Partition -> its open handle.
        self.open: dict[int, Rdict] = {}
        #: Partition -> the offset its open handle holds (None: none yet); only for handles
        #: open now, and missing for one whose offset is no integer (the inventory says so).
        self.offsets: dict[int, int | None] = {}
        #: Partition -> the close of its released handle, dropped once done.
        self.closing: dict[int, Future[None]] = {}

    def get(self, partition: int) -> Rdict:
        """The partition's handle, opened if it is not."""
        db = self.open.get(partition)
        if db is None:
            db = self._open(partition)
        return db

    def _open(self, partition: int) -> Rdict:
        under_way = self.closing.get(partition)
        if under_way is not None:
            # Opened before its close ended (not by the rebalance step, which awaits it): its
            # lock is held until then.
            under_way.result()
        try:
            db = self._open_db(partition)
        except Exception as exc:  # rocksdict raises plain Exception
            if LOCK_HELD_HERE not in str(exc):
                raise
            # A handle of this store, released earlier, is still alive in a reference cycle.
            logger.info(
                "streamapp: store %s partition %d is still locked by this worker; collecting the "
                "handle a reference cycle kept alive, then opening it again",
                self.name,
                partition,
            )
            startup_heap.collect_all()
            db = self._open_db(partition)
        self.open[partition] = db
        # An offset key that is no integer is not noted: the inventory reads it from disk and
        # says so.
        with suppress(ValueError):
            self.offsets[partition] = decode_offset(db.get(OFFSET_KEY))
        return db

    def note_offset(self, partition: int, offset: int) -> None:
        """The partition's open handle holds ``offset`` now (written after the data it covers)."""
        if partition in self.open:
            self.offsets[partition] = offset

    def open_offsets(self) -> dict[int, int | None]:
        """Partition -> persisted offset of each handle open now; safe from any thread."""
        return dict(self.offsets)

    def release(self, partitions: Iterable[int]) -> None:
        """Give up the handles of ``partitions``: each is closed on the closer thread."""
        for partition in partitions:
            self.offsets.pop(partition, None)
            db = self.open.pop(partition, None)
            if db is None:
                continue
            logger.info("closing db %s partition %d", self.name, partition)
            future = closer.submit(_close, db, f"{self.name} partition {partition}")
            del db  # the closer holds it now
            self.closing[partition] = future
            future.add_done_callback(self._forget_close(partition))

    def _forget_close(self, partition: int) -> Callable[[Future[None]], None]:
        def forget(done: Future[None]) -> None:
            if self.closing.get(partition) is done:
                del self.closing[partition]

        return forget

    def closes_under_way(self) -> list[Future[None]]:
        """The closes of released handles not finished yet."""
        return list(self.closing.values())

    def close(self, partition: int) -> bool:
        """Close the partition's handle here and now, and forget it; False if none was open."""
        self.offsets.pop(partition, None)
        db = self.open.pop(partition, None)
        if db is None:
            return False
        _close(db, f"{self.name} partition {partition}")
        return True

    def close_all(self) -> None:
        """Close every open handle here and now (a stop: nothing runs on the store any more)."""
        for partition in sorted(self.open):
            self.close(partition)
