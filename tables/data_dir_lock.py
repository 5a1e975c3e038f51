"""One worker per data directory: an exclusive lock held for the life of the process.

Two workers on one data dir would open the same rocksdict stores, overwrite each other's
client id, ownership record and changelog offsets, and both claim the same local state to
the group leader. The lock is an ``fcntl.flock`` on ``<data dir>/streamapp.lock``, which
also records the holder's pid so the refusal can name it.

``flock`` belongs to the open file, not to the file's presence on disk: the kernel drops
it when the holding process exits for any reason, SIGKILL and OOM kill included. So a lock
file left behind never blocks a restart, and nothing here ever deletes it (deleting it while
another process has it open would let two processes each lock a different file).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

__all__ = ["LOCK_FILE", "DataDirInUse", "DataDirLock", "lock_data_dir"]

LOCK_FILE = "streamapp.lock"

# A holder writes its pid right after taking the lock; a contender arriving in between
# sees an empty file. Waiting this long for the pid to appear costs nothing in the normal
# case (the pid is there) and makes the refusal name the holder.
_PID_WAIT_S = 0.5


class DataDirInUse(RuntimeError):
    """Another process holds the data dir's lock; ``pid`` is that process when known."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        self.data_dir = data_dir
        self.pid = pid
        holder = f"pid {pid} (another worker)" if pid is not None else "another worker"
        super().__init__(f"data dir {data_dir} is in use by {holder}")


class DataDirLock:
    """The held lock of one data dir; `release` (or process exit) gives it up."""

    def __init__(self, data_dir: Path, fd: int) -> None:
        self.data_dir = data_dir
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the lock up now (closing the file drops the flock); idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _read_pid(fd: int) -> int | None:
    deadline = time.monotonic() + _PID_WAIT_S
    while True:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return int(text)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def lock_data_dir(data_dir: str | Path) -> DataDirLock:
    """Take ``data_dir``'s lock without waiting, or raise `DataDirInUse` naming the holder.

    The lock lives as long as its file descriptor, which only `DataDirLock.release` or the
    end of the process closes: dropping the returned object does not give the lock up
    behind the worker's back. The descriptor is not inherited by child processes (Python
    opens files close-on-exec), so a helper process the worker starts cannot keep the lock
    alive after the worker dies. Raises `OSError` when the lock file cannot be created (the
    directory is missing or not writable).
    """
    directory = Path(data_dir).absolute()
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            os.close(fd)
            raise
        pid = _read_pid(fd)
        os.close(fd)
        raise DataDirInUse(directory, pid) from None
    try:
        # Only the holder writes, so this never races another writer.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError:
        os.close(fd)
        raise
    return DataDirLock(directory, fd)
