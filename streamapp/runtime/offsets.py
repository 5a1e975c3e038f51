"""Which offset of each partition a worker may commit: the records it handed out, in offset order,
and which of them its streams have processed.

The fetch loop hands a partition's records out in offset order, and a stream acks each once
processed, not always in that order (several agents read one topic; an agent awaits). The offset
to commit is the one after the last record of the longest processed prefix of what was handed
out: a record handed out and not processed yet holds the partition's commits back, whatever was
processed after it. Offsets the loop never handed out (transaction markers, records compacted
away, aborted records under read_committed) are never waited for: they are not in the ledger.

Kept per partition: the offsets handed out and not yet behind the commit mark, in order (a
deque: appended as handed out, taken from the front as the processed prefix grows), the records
handed out and not processed yet, and the last offset committed. A record is acked by the very
object that was handed out: a record of the same offset handed out before the partition was
sought again (a late ack from before a rebalance) does not count for the one handed out since.
Every operation is O(1) per record, amortized.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Partition = TypeVar("Partition", bound=Hashable)


@dataclass(slots=True)
class _Redo:
    """Records dropped unprocessed, to hand out once more as the partition is read again from
    the first of them: the others up to ``through`` went out already and are skipped."""

    offsets: set[int]
    through: int


@dataclass(slots=True)
class _Ledger:
    handed: deque[int] = field(default_factory=deque)
    #: offset -> the record handed out, for those not processed yet.
    unprocessed: dict[int, object] = field(default_factory=dict)
    #: The offset after the processed prefix (None: nothing processed since the last seek).
    mark: int | None = None
    #: The offset last committed (None: unknown or none).
    committed: int | None = None
    #: Records dropped unprocessed, not yet sought back to (`drop`), then being handed out
    #: once more (`rewind`).
    dropped: set[int] = field(default_factory=set)
    redo: _Redo | None = None


class OffsetLedger(Generic[Partition]):
    """Per partition, what was handed out and what of it was processed (see the module)."""

    def __init__(self) -> None:
        self._ledgers: dict[Partition, _Ledger] = {}
        #: Acks since the count was last reset: the loop commits every ``broker_commit_every``.
        self.acks_since_reset = 0

    def _ledger(self, tp: Partition) -> _Ledger:
        ledger = self._ledgers.get(tp)
        if ledger is None:
            ledger = self._ledgers[tp] = _Ledger()
        return ledger

    def handed_out(self, tp: Partition, offset: int, record: object) -> None:
        """Note ``record`` handed to the streams; offsets come in increasing order per partition
        (a seek back first calls `restart`, or `rewind` for records dropped unprocessed)."""
        ledger = self._ledger(tp)
        if offset not in ledger.unprocessed:
            ledger.handed.append(offset)
        ledger.unprocessed[offset] = record

    def admit(self, tp: Partition, offset: int) -> bool:
        """Whether the record at ``offset`` goes to the streams: False for one handed out
        already while the partition hands dropped records out once more (`rewind`)."""
        ledger = self._ledgers.get(tp)
        if ledger is None or ledger.redo is None:
            return True
        redo = ledger.redo
        if offset > redo.through:
            ledger.redo = None
            return True
        if offset in redo.offsets:
            redo.offsets.discard(offset)
            return True
        return False

    def drop(self, tp: Partition, offset: int, record: object) -> bool:
        """``record`` was dropped from a stream's queue unprocessed: it will go out once more
        (True), if it is one handed out and unprocessed."""
        ledger = self._ledgers.get(tp)
        if ledger is None or ledger.unprocessed.get(offset) is not record:
            return False
        ledger.dropped.add(offset)
        return True

    def rewind(self, tp: Partition) -> tuple[int, int] | None:
        """The partition is about to be read again from its first dropped record: returns that
        offset and how many were dropped (None: nothing to go back for)."""
        ledger = self._ledgers.get(tp)
        if ledger is None or not ledger.dropped or not ledger.handed:
            return None
        dropped, ledger.dropped = ledger.dropped, set()
        if ledger.redo is not None:  # dropped again before all came back
            dropped |= ledger.redo.offsets
        ledger.redo = _Redo(offsets=set(dropped), through=ledger.handed[-1])
        return min(dropped), len(dropped)

    def ack(self, tp: Partition, offset: int, record: object) -> bool:
        """Note ``record`` processed; False if it is not one handed out and unprocessed."""
        ledger = self._ledgers.get(tp)
        if ledger is None or ledger.unprocessed.get(offset) is not record:
            return False
        unprocessed = ledger.unprocessed
        del unprocessed[offset]
        self.acks_since_reset += 1
        # Grow the processed prefix now: the commit then has nothing left to walk.
        handed = ledger.handed
        while handed and handed[0] not in unprocessed:
            ledger.mark = handed.popleft() + 1
        return True

    def committable(self, tps: Iterable[Partition] | None = None) -> dict[Partition, int]:
        """The offset to commit for each partition (of ``tps``, or all) whose processed prefix
        has passed its last committed offset."""
        found: dict[Partition, int] = {}
        ledgers = self._ledgers
        for tp in ledgers if tps is None else tps:
            ledger = ledgers.get(tp)
            if ledger is None or ledger.mark is None:
                continue
            if ledger.committed is None or ledger.mark > ledger.committed:
                found[tp] = ledger.mark
        return found

    def committed(self, offsets: Mapping[Partition, int]) -> None:
        """Note offsets the broker accepted (a refused commit is not noted: the same offsets
        are committable again next time)."""
        for tp, offset in offsets.items():
            ledger = self._ledgers.get(tp)
            if ledger is not None and (ledger.committed is None or offset > ledger.committed):
                ledger.committed = offset

    def restart(self, tp: Partition, committed: int | None) -> None:
        """The partition was sought (to its committed offset, after a rebalance): nothing of it is
        handed out any more, and ``committed`` is its committed offset."""
        self._ledgers[tp] = _Ledger(committed=committed)

    def pending(self, tps: Iterable[Partition] | None = None) -> int:
        """How many records handed out (of ``tps``, or all) are not processed yet."""
        ledgers = self._ledgers
        return sum(
            len(ledger.unprocessed)
            for tp in (ledgers if tps is None else tps)
            if (ledger := ledgers.get(tp)) is not None
        )

    def first_pending(self, tp: Partition) -> int | None:
        """The first offset handed out and not processed yet (None: none)."""
        ledger = self._ledgers.get(tp)
        return ledger.handed[0] if ledger is not None and ledger.handed else None

    def last_committed(self, tp: Partition) -> int | None:
        ledger = self._ledgers.get(tp)
        return None if ledger is None else ledger.committed

    def forget(self, tps: Iterable[Partition]) -> None:
        """Drop what is known of partitions given up."""
        for tp in tps:
            self._ledgers.pop(tp, None)

    def partitions(self) -> list[Partition]:
        return list(self._ledgers)
