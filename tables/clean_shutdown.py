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

Under at_least_once nothing is discarded: replaying inputs over state that already saw them is
what at-least-once allows. The marker is still kept, so a later switch to exactly_once is judged
on how the previous run really ended.
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
from tables.inventory import scan_stores
from tables.ownership import OWNERSHIP_FILE

logger = logging.getLogger(__name__)

MARKER_FILE = "streamapp-clean-shutdown"


class StateInUseError(RuntimeError):
    """A store that would be discarded is open in another process."""


def must_discard(*, exactly_once: bool, clean_shutdown: bool, has_stores: bool) -> bool:
    """Whether the local stores left by the previous run must go before this one opens them."""
    return exactly_once and not clean_shutdown and has_stores


def store_paths(tabledir: Path) -> list[Path]:
    """Every table store in ``tabledir``, whichever table it belongs to."""
    return [store.path for store in scan_stores(tabledir)]


def begin_run(tabledir: str | Path, data_dir: str | Path, *, exactly_once: bool) -> list[Path]:
    """Called as a worker starts, before any store is opened; returns the stores discarded.

    Discarding a store also forgets what this worker owned before (the ownership record): a
    claim on a task whose state is gone would keep the task here, to be replayed in full, while
    a standby elsewhere holds it. The local-state inventory simply finds no store any more.
    """
    tabledir = Path(tabledir)
    marker = tabledir / MARKER_FILE
    stores = store_paths(tabledir)
    discarded: list[Path] = []
    if must_discard(
        exactly_once=exactly_once, clean_shutdown=marker.exists(), has_stores=bool(stores)
    ):
        _refuse_if_open(stores)
        logger.warning(
            "streamapp: discarding %d local stores in %s: the previous run did not shut down "
            "cleanly, and under exactly_once they may hold writes of aborted transactions; "
            "they are restored from the changelogs (committed records only)",
            len(stores),
            tabledir,
        )
        for path in stores:
            shutil.rmtree(path)
            discarded.append(path)
        (Path(data_dir) / OWNERSHIP_FILE).unlink(missing_ok=True)
    marker.unlink(missing_ok=True)
    return discarded


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
