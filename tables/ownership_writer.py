"""The ownership record (`tables.ownership`) saved on a thread of its own, not where it is made.

Each assignment's record is made in ``PartitionAssignor.on_assignment``, on aiokafka's consumer
thread, whose heartbeats and fetches wait for whatever that callback does. Writing the file
there (a scratch file, then a rename) held that thread 2 to 3 ms (median) and up to 62 ms in
benchmark runs at load 7 to 9: every file call gives the GIL up, and on a busy worker taking it
back waits for the event loop. Here the callback only hands the record over.

Nothing in the run reads the file back: it is read as the next run starts (the claims a
restarted worker reports) and rewritten by that run's start-up checks, before any assignment.
So a record written a moment late changes nothing, and only the latest one matters: a record
still waiting when a newer one comes is dropped. A crash before the write leaves the previous
record whole (`tables.atomic_file`), the same state as a crash just before the assignment came,
which the plan has to take anyway: a claim is a hint checked against generations (an older
claim loses to a newer owner's), and a lost claim costs stickiness only. Which stores are
kept after a crash does not depend on this record (`tables.clean_shutdown`).
A clean shutdown waits for the last record (`flush`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from tables.ownership import Ownership, save_ownership

logger = logging.getLogger(__name__)


class OwnershipWriter:
    """Writes the ownership records given to `save` in ``data_dir``, the latest of them."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir)
        self._changed = threading.Condition()
        self._pending: Ownership | None = None
        self._writing = False
        self._thread: threading.Thread | None = None

    def save(self, ownership: Ownership) -> None:
        """Have ``ownership`` written; returns without waiting for the file."""
        with self._changed:
            self._pending = ownership
            if self._thread is None:
                # Daemon: a process that exits without `flush` loses a record as a crash would.
                self._thread = threading.Thread(
                    target=self._run, name="streamapp-ownership", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record given to `save` is written (or dropped for a newer one);
        False if ``timeout`` seconds passed first."""
        with self._changed:
            return self._changed.wait_for(
                lambda: self._pending is None and not self._writing, timeout
            )

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending is not None)
                ownership, self._pending = self._pending, None
                self._writing = True
            try:
                assert ownership is not None
                save_ownership(self.data_dir, ownership)
            except OSError as exc:
                # As an unreadable record: the next run loses the hint, not its local state.
                logger.warning(
                    "streamapp: ownership record not saved in %s: %s", self.data_dir, exc
                )
            finally:
                with self._changed:
                    self._writing = False
                    self._changed.notify_all()
