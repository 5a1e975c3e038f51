"""Files a crash must never leave half-written: written whole beside, then renamed over; and
directories whose entries must survive a power loss."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: a crash, even a power loss, leaves the old content or
    the new, never part and never an empty file.

    ``os.replace`` is atomic on POSIX within one file system, and the scratch file sits in the
    same directory. Without an fsync of the scratch file before the rename, a power loss can
    leave the rename on disk but not the data (ext4 and xfs may write the directory first):
    an empty file where the old record was. The directory's fsync after it makes the new name
    itself durable, so a caller may act on the write once this returns. The directory is
    created if needed.

    It blocks on the disk: callers on an event loop run it on a thread, or only where a
    pause does not matter (a worker's start or stop).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = memoryview(text.encode())
        while data:  # a regular file takes it all at once, but write() may say otherwise
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(scratch, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` durable (names created, renamed or removed in
    it): a file's own fsync does not cover its name."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
