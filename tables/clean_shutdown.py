"""Local state after an unclean stop under exactly_once: discarded, then restored from changelogs.

Faust's rocksdb store applies a table write at once and records the changelog offset as soon as
the broker acknowledges the changelog record, before the transaction carrying it commits. A
worker killed mid-transaction therefore leaves stores holding writes of a transaction the broker
then aborts, with offsets past them. On restart, recovery resumes after those offsets and reads
committed records only, so the aborted writes stay; the inputs processed again then meet state
that says they were done already, and their output never appears.

Kafka Streams (before KIP-892) answers this the same way: under exactly-once, local state is
trusted only after a clean close, and otherwise wiped and restored from the changelog. Here the
proof of a clean close is a marker file beside the stores, written once the worker has committed
its last transaction and removed as the next run starts, so a crash at any later point leaves
no marker behind.

Only a store this process wrote to can hold such writes. A standby or warmup replica applies
committed changelog records only (the consumer reads ``read_committed`` under exactly_once), and
its offset is set with them, so it holds committed state whatever the crash interrupted. Each
store therefore carries a mark, ``<tabledir>/streamapp-active-stores/<store>.active``, made
durable (file and directory fsynced) as the partition is assigned to this process as an active,
before Faust opens the store and before any agent can write to it. After an unclean stop under
exactly_once only the marked stores are discarded; the others are kept and recovery replays
their tail. Those fsyncs wait for the disk (tenths of a second on a busy machine): a rebalance
makes the marks on a thread (`tables.store_guard.mark_assigned_actives`), its event loop
processing the partitions it keeps meanwhile, and opens no store until they are durable.

A mark is removed only as the next run starts: all of them after a clean shutdown (every store
then holds committed state), or with the store it marks when that store is discarded. A store
that was a standby, became active and then crashed is marked, so it goes; one marked, revoked
and then a standby again stays marked until a clean shutdown, as the writes of a transaction
aborted at its revocation may still be in it.

A data dir whose marks directory does not exist yet (state left by a streamapp that kept no
marks) tells nothing about which stores were active: after an unclean stop all its stores go.

Under at_least_once nothing is discarded: replaying inputs over state that already saw them is
what at-least-once allows. The markers are still kept, so a later switch to exactly_once is
judged on how the previous run really ended and what it wrote.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from tables.atomic_file import fsync_dir, write_atomically
from tables.damaged import forget_claims
from tables.inventory import scan_stores

logger = logging.getLogger(__name__)

MARKER_FILE = "streamapp-clean-shutdown"
#: Beside the stores: one file per store this process may have written uncommitted state to,
#: ``<table>-<partition>.db.active`` (not ``.db``: nothing looking for stores may take it for one).
ACTIVE_MARKS_DIR = "streamapp-active-stores"
MARK_SUFFIX = ".active"


class StateInUseError(RuntimeError):
    """A store that would be discarded is open in another process."""


def must_discard(
    *, exactly_once: bool, clean_shutdown: bool, marks_kept: bool, marked_active: bool
) -> bool:
    """Whether one local store left by the previous run must go before this one opens it.

    ``marks_kept``: the previous run kept active marks (their directory exists);
    ``marked_active``: this store has one, so it may have taken writes of a transaction that
    the crash aborted.
    """
    if not exactly_once or clean_shutdown:
        return False
    return marked_active or not marks_kept


def store_paths(tabledir: Path) -> list[Path]:
    """Every table store in ``tabledir``, whichever table it belongs to."""
    return [store.path for store in scan_stores(tabledir)]


def active_marks(tabledir: Path) -> set[str]:
    """The store names (``<table>-<partition>.db``) marked as written by a past run."""
    marks_dir = tabledir / ACTIVE_MARKS_DIR
    if not marks_dir.is_dir():
        return set()
    return {
        path.name.removesuffix(MARK_SUFFIX)
        for path in marks_dir.iterdir()
        if path.name.endswith(MARK_SUFFIX)
    }


def begin_run(tabledir: str | Path, data_dir: str | Path, *, exactly_once: bool) -> list[Path]:
    """Called as a worker starts, before any store is opened; returns the stores discarded.

    Discarding a store also forgets the ownership record's claims on its partition: a claim
    on a task whose state is gone would keep the task here, to be replayed in full, while a
    standby elsewhere holds it. The local-state inventory simply finds no store any more.
    """
    tabledir = Path(tabledir)
    marker = tabledir / MARKER_FILE
    marks_dir = tabledir / ACTIVE_MARKS_DIR
    clean = marker.exists()
    marks_kept = marks_dir.is_dir()
    marked = active_marks(tabledir)
    stores = scan_stores(tabledir)
    doomed = [
        store
        for store in stores
        if must_discard(
            exactly_once=exactly_once,
            clean_shutdown=clean,
            marks_kept=marks_kept,
            marked_active=store.path.name in marked,
        )
    ]
    if doomed:
        _refuse_if_open([store.path for store in doomed])
        kept = [store.path.name for store in stores if store not in doomed]
        logger.warning(
            "streamapp: discarding %d of %d local stores in %s (%s): the previous run did not "
            "shut down cleanly, and under exactly_once %s; they are restored from the "
            "changelogs (committed records only). Kept: %s",
            len(doomed),
            len(stores),
            tabledir,
            ", ".join(store.path.name for store in doomed),
            "these were written by it and may hold writes of aborted transactions"
            if marks_kept
            else "this data dir does not say which stores it wrote (no active marks)",
            ", ".join(kept) if kept else "none",
        )
        # Claims first: a crash before the stores are gone discards them again next time.
        forget_claims(Path(data_dir), {store.partition for store in doomed})
        for store in doomed:
            shutil.rmtree(store.path)
    # A mark goes only once nothing it covers can hold uncommitted writes: every mark after a
    # clean shutdown; under exactly_once the marks of stores just discarded or already gone.
    # After a crash under at_least_once the marks stay, for a later run under exactly_once.
    present = {store.path.name for store in stores if store not in doomed}
    for name in marked:
        if clean or (exactly_once and name not in present):
            (marks_dir / (name + MARK_SUFFIX)).unlink(missing_ok=True)
    _make_durable_dir(marks_dir)
    # Last: until here a crash leaves the previous run's verdict as it was.
    marker.unlink(missing_ok=True)
    return [store.path for store in doomed]


#: Held through each `mark_active`: a call skips a mark that exists, which is durable only once
#: the call that created it has returned. A rebalance cancelled while its marks were being made
#: on a thread leaves that thread running; the next rebalance's call waits for it here rather
#: than take a mark not synced yet for a durable one.
_marking = threading.Lock()


def mark_active(tabledir: str | Path, store_names: Iterable[str]) -> list[str]:
    """Mark the stores ``store_names`` (``<table>-<partition>.db``) as written by this run;
    returns those newly marked. Durable on return: call it before such a store can take a
    write that is not committed yet. One directory fsync covers every mark of the call.

    It blocks on fsync: not on the event loop (see `tables.store_guard.mark_assigned_actives`).
    """
    with _marking:
        return _mark_active(Path(tabledir) / ACTIVE_MARKS_DIR, store_names)


def _mark_active(marks_dir: Path, store_names: Iterable[str]) -> list[str]:
    added = []
    for name in store_names:
        path = marks_dir / (name + MARK_SUFFIX)
        if path.exists():
            continue
        marks_dir.mkdir(parents=True, exist_ok=True)
        # Its existence is the mark: created, written and synced before the directory is.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"active in a run that has not shut down cleanly yet\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        added.append(name)
    if added:
        fsync_dir(marks_dir)
    return added


def mark_clean_shutdown(tabledir: str | Path) -> None:
    """Record that every store in ``tabledir`` holds committed state only."""
    marker = Path(tabledir) / MARKER_FILE
    # A marker must never be half there.
    write_atomically(marker, "stores closed after the last commit\n")


def _make_durable_dir(path: Path) -> None:
    if not path.is_dir():
        path.mkdir(parents=True)
        fsync_dir(path.parent)
    fsync_dir(path)


def _refuse_if_open(stores: Sequence[Path]) -> None:
    """Raise if another process holds any of ``stores`` open (RocksDB's lock on ``LOCK``).

    RocksDB locks that file with a POSIX record lock, which a probe from another process sees.
    The probe's own lock vanishes when its descriptor closes; this process opened no store yet,
    so closing the descriptor drops no lock of its own.
    """
    for store in stores:
        lock = store / "LOCK"
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                raise StateInUseError(
                    f"{store} is open in another process: is another worker running on this "
                    "data dir? Stop it, or give this worker a data dir of its own"
                ) from None
            raise
        finally:
            os.close(fd)
