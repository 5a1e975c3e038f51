"""Local state after an unclean stop: what a worker keeps of the stores the previous run left.

Under exactly_once streamapp's stores are transactional (`streamapp.runtime.stores`): a table
write waits in memory until the transaction that carried its changelog record has committed,
and only then reaches the store, in one write batch with the changelog offset it reaches. A
store on disk so holds committed writes only, and its offset is that of the last committed
one, whatever a crash interrupted: a worker killed mid-transaction keeps every store, and
recovery replays only the changelog's tail past its offset, as under at-least-once. Nothing is
discarded.

Two kinds of data dir can still hold writes that were never committed, and their stores are
discarded once, as a worker under exactly_once starts after an unclean stop, then restored from
the changelogs (committed records only):

- a data dir last run under at_least_once: its stores took each write at once, and hold writes
  of records whose offsets were not committed, which exactly_once processes again (every store
  goes: at-least-once does not say which stores it wrote, and does not need to);
- a data dir of an older streamapp, whose exactly_once stores took each write at once too. It
  marked each store it wrote as an active in ``<tabledir>/streamapp-active-stores/`` (the
  active marks): the marked stores go, the others (standbys and warmups, which applied
  committed changelog records only) are kept; the marks then go for good. One older still, with
  neither marks nor a record of its guarantee, says nothing about which stores it wrote: all of
  its stores go.

How the previous run wrote is kept beside the stores: ``streamapp-run-guarantee`` (the
processing guarantee of the last run that started on the data dir, written before it opens any
store) and ``streamapp-clean-shutdown`` (written once a worker has committed its last
transaction and closed its stores, removed as the next run starts, so a crash at any later point
leaves none behind). Under at_least_once nothing is ever discarded: replaying inputs over state
that already saw them is what at-least-once allows.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from tables.atomic_file import write_atomically
from tables.damaged import forget_claims
from tables.inventory import scan_stores

logger = logging.getLogger(__name__)

MARKER_FILE = "streamapp-clean-shutdown"
#: The processing guarantee of the last run that started on the data dir (`RUN_GUARANTEE_FILE`'s
#: text is one of `EXACTLY_ONCE` and `AT_LEAST_ONCE`).
RUN_GUARANTEE_FILE = "streamapp-run-guarantee"
EXACTLY_ONCE = "exactly_once"
AT_LEAST_ONCE = "at_least_once"
#: The older scheme's active marks: ``<table>-<partition>.db.active``, one per store a run
#: under exactly_once wrote to directly.
ACTIVE_MARKS_DIR = "streamapp-active-stores"
MARK_SUFFIX = ".active"


class StateInUseError(RuntimeError):
    """A store that would be discarded is open in another process."""


def must_discard(
    *,
    exactly_once: bool,
    clean_shutdown: bool,
    previous_guarantee: str | None,
    marks_kept: bool,
    marked_active: bool,
) -> bool:
    """Whether one local store left by the previous run must go before this one opens it.

    ``previous_guarantee``: what the previous run recorded (None: nothing, an older streamapp);
    ``marks_kept``: the data dir holds an older streamapp's active marks; ``marked_active``:
    this store has one, so it may hold writes of a transaction the crash aborted.
    """
    if not exactly_once or clean_shutdown:
        return False
    if previous_guarantee == AT_LEAST_ONCE:
        return True
    if marks_kept:
        return marked_active
    return previous_guarantee != EXACTLY_ONCE


def store_paths(tabledir: Path) -> list[Path]:
    """Every table store in ``tabledir``, whichever table it belongs to."""
    return [store.path for store in scan_stores(tabledir)]


def active_marks(tabledir: Path) -> set[str]:
    """The store names (``<table>-<partition>.db``) an older streamapp marked as written."""
    marks_dir = tabledir / ACTIVE_MARKS_DIR
    if not marks_dir.is_dir():
        return set()
    return {
        path.name.removesuffix(MARK_SUFFIX)
        for path in marks_dir.iterdir()
        if path.name.endswith(MARK_SUFFIX)
    }


def previous_guarantee(tabledir: Path) -> str | None:
    """The processing guarantee the previous run recorded (None: none, or unreadable)."""
    try:
        text = (tabledir / RUN_GUARANTEE_FILE).read_text().strip()
    except OSError:
        return None
    return text if text in (EXACTLY_ONCE, AT_LEAST_ONCE) else None


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
    previous = previous_guarantee(tabledir)
    stores = scan_stores(tabledir)
    doomed = [
        store
        for store in stores
        if must_discard(
            exactly_once=exactly_once,
            clean_shutdown=clean,
            previous_guarantee=previous,
            marks_kept=marks_kept,
            marked_active=store.path.name in marked,
        )
    ]
    if doomed:
        _refuse_if_open([store.path for store in doomed])
        kept = [store.path.name for store in stores if store not in doomed]
        logger.warning(
            "streamapp: discarding %d of %d local stores in %s (%s): the previous run did not "
            "shut down cleanly, and %s; they are restored from the changelogs (committed "
            "records only). Kept: %s",
            len(doomed),
            len(stores),
            tabledir,
            ", ".join(store.path.name for store in doomed),
            _why(marks_kept, previous),
            ", ".join(kept) if kept else "none",
        )
        # Claims first: a crash before the stores are gone discards them again next time.
        forget_claims(Path(data_dir), {store.partition for store in doomed})
        for store in doomed:
            shutil.rmtree(store.path)
    tabledir.mkdir(parents=True, exist_ok=True)
    # Before the marks go: a crash in between finds the marks, and their rule, again.
    write_atomically(
        tabledir / RUN_GUARANTEE_FILE, (EXACTLY_ONCE if exactly_once else AT_LEAST_ONCE) + "\n"
    )
    # What the marks said is settled: the stores they named are gone, or this run writes under
    # at_least_once, which a later run under exactly_once learns from the file just written.
    shutil.rmtree(marks_dir, ignore_errors=True)
    # Last: until here a crash leaves the previous run's verdict as it was.
    marker.unlink(missing_ok=True)
    return [store.path for store in doomed]


def _why(marks_kept: bool, previous: str | None) -> str:
    if previous == AT_LEAST_ONCE:
        return (
            "it ran under at_least_once: its stores may hold writes of records whose offsets "
            "were not committed, which exactly_once processes again"
        )
    if marks_kept:
        return (
            "these were written by a streamapp that stored uncommitted writes under "
            "exactly_once (its active marks name them)"
        )
    return "this data dir does not say how its stores were written (an older streamapp's)"


def mark_clean_shutdown(tabledir: str | Path) -> None:
    """Record that every store in ``tabledir`` holds committed state only."""
    marker = Path(tabledir) / MARKER_FILE
    # A marker must never be half there.
    write_atomically(marker, "stores closed after the last commit\n")


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
