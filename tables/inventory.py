"""Which changelog partitions this process has on disk, and up to which offset.

Faust's rocksdb store (rocksdict driver) keeps one RocksDB per table partition at
``<tabledir>/<table name>-<partition>.db``, with the offset of the last changelog record it applied
under the key ``__faust\\0offset__`` as ASCII digits. Stores outlive ownership (revocation closes
handles, keeps files), so the inventory covers partitions this worker does not own now, too.

Each store is opened read-only: that takes no lock, so it works beside the worker's own open
handle, and it never creates or alters anything on disk. A store the worker has open itself need
not be opened again: its caller may pass the offsets it knows of those (``known``), read from the
open handles; only the other stores are opened. A read-only open costs tens of ms on a busy
machine (hundreds at a load of 10 on two cores, the GIL held throughout), and the group's join
waits for this answer at every rebalance.

A store that nobody has open does not change, so one inventory reads it once: it keeps what it
read with the name, size and modification time of every file in the store's directory, and
reads it again only when those change. RocksDB never rewrites a store's files in place but its
write-ahead log, which grows with every write; an open alone creates files (a log, a manifest),
so a store opened, written or replaced since (moved aside, recreated) is read again.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import rocksdict

logger = logging.getLogger(__name__)

OFFSET_KEY = b"__faust\x00offset__"
#: ``<table name>-<partition>.db``: one store, as faust 0.15.3 names them.
STORE_NAME = re.compile(r"^(?P<table>.+)-(?P<partition>\d+)\.db$")


@dataclass(frozen=True)
class StoreOnDisk:
    """One table partition's store directory, ``<tabledir>/<table>-<partition>.db``."""

    table: str
    partition: int
    path: Path


def scan_stores(tabledir: Path) -> list[StoreOnDisk]:
    """Every table store in ``tabledir``, whichever table it belongs to, in name order."""
    if not tabledir.is_dir():
        return []
    found = []
    for path in sorted(tabledir.iterdir()):
        match = STORE_NAME.match(path.name)
        if match is not None and path.is_dir():
            found.append(StoreOnDisk(match["table"], int(match["partition"]), path))
    return found


def read_persisted_offset(path: Path) -> int | None:
    """The last applied changelog offset kept in the store at ``path``, or None if it has none."""
    db = rocksdict.Rdict(
        str(path),
        options=rocksdict.Options(raw_mode=True),
        access_type=rocksdict.AccessType.read_only(),
    )
    try:
        raw = db.get(OFFSET_KEY)
    finally:
        db.close()
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{path}: offset key holds {raw!r}, not an integer") from None


class LocalStateInventory:
    """Scans a table directory for the stores of known tables and reads their offsets."""

    def __init__(self, tabledir: Path, changelog_topics: Mapping[str, str]) -> None:
        """``changelog_topics``: table name -> its changelog topic."""
        self.tabledir = Path(tabledir)
        self.changelog_topics = dict(changelog_topics)
        self._warned: set[Path] = set()
        #: Store path -> its files when last read, and the offset read then.
        self._read_before: dict[Path, tuple[tuple[tuple[str, int, int], ...], int | None]] = {}

    def offsets(
        self, known: Mapping[tuple[str, int], int | None] | None = None
    ) -> dict[str, dict[int, int]]:
        """Changelog topic -> partition -> next offset to apply (last applied + 1).

        ``known``: (table name, partition) -> last applied offset (None: none), of stores the
        caller has open and knows the offset of; those are not read from disk. Only stores
        found on disk are reported, known or not.

        Stores that have applied nothing are left out: they hold no state worth keeping. A store
        that cannot be read is left out with one warning naming it; the worker carries on as if
        it had no state there, which only costs a replay.
        """
        known = known or {}
        result: dict[str, dict[int, int]] = {}
        for store in scan_stores(self.tabledir):
            topic = self.changelog_topics.get(store.table)
            if topic is None:
                continue
            key = (store.table, store.partition)
            offset = known[key] if key in known else self._read(store.path)
            if offset is not None and offset >= 0:
                result.setdefault(topic, {})[store.partition] = offset + 1
        return result

    def _read(self, path: Path) -> int | None:
        try:
            # Taken before the read: a change during the read is seen at the next one.
            files = store_files(path)
        except OSError:
            files = None
        before = self._read_before.get(path)
        if files is not None and before is not None and before[0] == files:
            return before[1]
        try:
            offset = read_persisted_offset(path)
        except Exception as exc:  # rocksdict raises plain Exception on open errors
            self._read_before.pop(path, None)
            if path not in self._warned:
                self._warned.add(path)
                logger.warning("local store %s is unreadable, ignored: %s", path, exc)
            return None
        if files is not None:
            self._read_before[path] = (files, offset)
        return offset


#: rocksdict writes its own settings file at every open, read-only ones included: the same
#: content, a new modification time. It holds no data.
ROCKSDICT_CONFIG = "rocksdict-config.json"


def store_files(path: Path) -> tuple[tuple[str, int, int], ...]:
    """Name, size and modification time (ns) of every file in a store's directory, sorted
    (but rocksdict's settings file)."""
    found = []
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name == ROCKSDICT_CONFIG:
                continue
            stat = entry.stat(follow_symlinks=False)
            found.append((entry.name, stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(found))
