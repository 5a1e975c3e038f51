"""A partition's writes that are not in its RocksDB store yet, and the one write batch that
stores them.

A batch agent's table writes wait here (`streamapp.table_writes.batch_table`): a read of the
partition looks here first, and the batch's end stores them in one rocksdict ``WriteBatch``
(`write_batch`): one write to RocksDB's log per batch, not one per record. A batch left
unfinished drops them.

Under exactly_once every table write waits here until the transaction that carried its
changelog record has committed (`streamapp.runtime.stores`, transactional stores): reads see
it meanwhile, and the commit stores the partition's writes with the changelog offset they
reach in one write batch. The writes keep what a commit needs to know:

- ``sources``: the source partitions whose records made them, each of which has a
  transaction of its own; the writes are stored once every one of them has committed;
- ``size``: about how much memory they take (`entry_size`: key and value bytes and the
  interpreter's cost of keeping them), so that the worker can commit early rather than let
  them grow without bound (the ``eos_pending_writes_max_bytes`` setting).

Every store of streamapp keeps one `PendingWrites` per partition for as long as it lives (it
is cleared, never replaced), so a holder of one can keep it across calls.
"""

from __future__ import annotations

from collections.abc import Mapping

from faust.types import TP
from rocksdict import WriteBatch

#: The key under which a partition's store keeps the offset of the last changelog record it
#: holds, as ASCII digits: Faust's, so stores written by Faust's RocksDB store open unchanged.
OFFSET_KEY = b"__faust\x00offset__"

#: What one pending write costs beyond its key and value bytes: two bytes objects' headers and
#: a dict entry, measured on CPython 3.11-3.13 at 100 to 110 bytes.
ENTRY_OVERHEAD = 100


class _Absent:
    """No pending write for a key (a pending deletion is None)."""


#: `PendingWrites.writes.get(key, ABSENT)` for a key without a pending write.
ABSENT = _Absent()


def entry_size(key: bytes, value: bytes | _Absent | None) -> int:
    """About the memory one pending write of ``key`` takes (0 for `ABSENT`)."""
    if isinstance(value, _Absent):
        return 0
    return ENTRY_OVERHEAD + len(key) + (0 if value is None else len(value))


class PendingWrites:
    """One partition's writes not stored yet (see the module)."""

    __slots__ = ("size", "sources", "writes")

    def __init__(self) -> None:
        #: Key bytes -> value bytes, None for a deletion, in the order first written. A plain
        #: dict, never replaced (cleared in place): a batch keeps it and does its per-record
        #: ``key in writes`` and ``writes[key] = value`` on it, at a dict's cost.
        self.writes: dict[bytes, bytes | None] = {}
        #: About the memory the writes take; kept by `stage` and `account` (the transactional
        #: writes), not by a batch writing ``writes`` itself at-least-once.
        self.size = 0
        #: The source partitions whose records made the writes (transactional writes).
        self.sources: set[TP] = set()

    def __len__(self) -> int:
        return len(self.writes)

    def stage(self, key: bytes, value: bytes | None) -> None:
        """``value`` for ``key`` (None: its deletion), not stored yet."""
        writes = self.writes
        self.size += entry_size(key, value) - entry_size(key, writes.get(key, ABSENT))
        writes[key] = value

    def account(self, before: Mapping[bytes, bytes | _Absent | None]) -> None:
        """The writes changed by hand (a batch's): ``before`` holds each changed key's pending
        write as it was (`ABSENT`: none); `size` follows."""
        writes = self.writes
        for key, old in before.items():
            self.size += entry_size(key, writes.get(key, ABSENT)) - entry_size(key, old)

    def lookup(self, key: bytes) -> tuple[bool, bytes | None]:
        """(True, the pending value, None for a pending deletion), or (False, None) when
        ``key`` has no pending write."""
        writes = self.writes
        if key in writes:
            return True, writes[key]
        return False, None

    def drop(self) -> None:
        """Forget every pending write (stored, or never to be: a batch left unfinished, a
        transaction aborted)."""
        self.writes.clear()
        self.size = 0
        self.sources.clear()


def write_batch(writes: Mapping[bytes, bytes | None], offset: int | None = None) -> WriteBatch:
    """One rocksdict write batch (raw bytes) of ``writes`` and, when given, the persisted
    changelog ``offset`` they reach: RocksDB applies it whole or not at all, so the offset can
    never be stored without the data it covers."""
    batch = WriteBatch(raw_mode=True)
    for key, value in writes.items():
        if value is None:
            batch.delete(key)
        else:
            batch.put(key, value)
    if offset is not None:
        batch.put(OFFSET_KEY, encode_offset(offset))
    return batch


def encode_offset(offset: int) -> bytes:
    """A persisted offset as Faust's RocksDB store writes it."""
    return str(offset).encode()


def decode_offset(raw: bytes | None) -> int | None:
    """A persisted offset read back (None: none stored). Raises `ValueError` for bytes that
    are no integer."""
    return None if raw is None else int(raw)
