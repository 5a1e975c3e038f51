"""A partition's writes that are not in its RocksDB store yet, and the one write batch that
stores them.

A batch agent's table writes wait here (`streamapp.faust_compat.batch_table`): a read of the
partition looks here first, and the batch's end stores them in one rocksdict ``WriteBatch``
(`write_batch`): one write to RocksDB's log per batch, not one per record. A batch left
unfinished drops them.
The same overlay is where writes can wait for more than a batch: a store that holds a
partition's writes until the transaction that made them has committed, or a table's write
cache flushed before each commit, stage here and store with `write_batch`, the changelog offset
they reach in the same batch.

Every store of streamapp keeps one `PendingWrites` per partition for as long as it lives (it
is cleared, never replaced), so a holder of one can keep it across calls.
"""

from __future__ import annotations

from collections.abc import Mapping

from rocksdict import WriteBatch

#: The key under which a partition's store keeps the offset of the last changelog record it
#: holds, as ASCII digits: Faust's, so stores written by Faust's RocksDB store open unchanged.
OFFSET_KEY = b"__faust\x00offset__"


class PendingWrites:
    """One partition's writes not stored yet (see the module)."""

    __slots__ = ("writes",)

    def __init__(self) -> None:
        #: Key bytes -> value bytes, None for a deletion, in the order first written. A plain
        #: dict, never replaced (cleared in place): a batch keeps it and does its per-record
        #: ``key in writes`` and ``writes[key] = value`` on it, at a dict's cost.
        self.writes: dict[bytes, bytes | None] = {}

    def __len__(self) -> int:
        return len(self.writes)

    def stage(self, key: bytes, value: bytes | None) -> None:
        """``value`` for ``key`` (None: its deletion), not stored yet."""
        self.writes[key] = value

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
