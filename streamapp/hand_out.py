"""Which fetched stream records a worker may hand to its streams: each offset once per generation.

Faust's fetch loop drops a record only when its offset is below the last one it read, and its
post-rebalance seek sets that mark back to the committed offset. So a record fetched a second
time within one generation reaches the streams again. In the ad-click demo this happened when
Faust resumed stream partitions before seeking them (fixed in
``streamapp.faust_compat.transport``): under exactly_once the second processing repeated
output in a transaction that could commit. Kafka Streams processes a task's records in offset
order, each once per incarnation of the task; this ledger holds the hand-out to the same rule,
so no other path to a second delivery can repeat output either.

A record of an older generation than the consumer's is refused too: Faust's stream would skip it
and ack it unprocessed, and a commit could then cover it. After a rebalance the partition is read
again from its committed offset, so refusing it loses nothing.

Records handed out and then dropped from a stream's queue unprocessed (a queue cleared while the
flow runs on, transport fix 27) are handed out once more: `HandOutLedger.rewind` names them,
and the partition is sought back to the first of them. Until each has come again, no other
record of the partition goes out: those below the mark were handed out already, those above it
come again after the seek, in offset order behind the dropped ones, which go out in offset order
too: a table's last write stays the last record's, and under exactly_once no record processed
past a hole is committed in a transaction before the hole's records are (processed again after
a crash).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Iterable
from enum import Enum


class Refusal(Enum):
    STALE_GENERATION = "fetched in an earlier generation"
    ALREADY_HANDED_OUT = "handed out already in this generation"
    AWAITING_DROPPED = "held until the records dropped before it are fetched again"


class HandOutLedger:
    """Per partition, the generation and the next offset a record may have to be handed out."""

    def __init__(self) -> None:
        self._next: dict[Hashable, tuple[int | None, int]] = {}
        #: Per partition, the generation and the offsets dropped unprocessed that may go out
        #: once more (`rewind`).
        self._dropped: dict[Hashable, tuple[int | None, list[int]]] = {}
        self.refused = 0

    def admit(
        self, tp: Hashable, offset: int, generation: int | None, current_generation: int
    ) -> Refusal | None:
        """None if the record may go to the streams (and is then counted as handed out)."""
        if generation != current_generation:
            self.refused += 1
            return Refusal.STALE_GENERATION
        dropped = self._dropped.get(tp)
        if dropped is not None and dropped[0] == generation:
            offsets = dropped[1]
            # Only the first of them: the seek back fetches them again in offset order, and
            # one further on may come from a fetch made before that seek (a drop while an
            # earlier seek's records were being handed out), ahead of the ones before it.
            if offset == offsets[0]:
                del offsets[0]
                if not offsets:
                    del self._dropped[tp]
                return None
            self.refused += 1
            seen = self._next.get(tp)
            at = bisect_left(offsets, offset)
            dropped_too = at < len(offsets) and offsets[at] == offset
            if not dropped_too and seen is not None and seen[0] == generation and offset < seen[1]:
                return Refusal.ALREADY_HANDED_OUT
            return Refusal.AWAITING_DROPPED
        if dropped is not None:
            del self._dropped[tp]  # dropped in an earlier generation: read again from a seek
        seen = self._next.get(tp)
        if seen is not None and seen[0] == generation and offset < seen[1]:
            self.refused += 1
            return Refusal.ALREADY_HANDED_OUT
        self._next[tp] = (generation, offset + 1)
        return None

    def rewind(self, tp: Hashable, offsets: Iterable[int], generation: int) -> None:
        """Records of ``tp`` at ``offsets`` were handed out in ``generation`` and dropped
        unprocessed: each may go out once more, in offset order, and nothing else of ``tp``
        until they have."""
        dropped = self._dropped.get(tp)
        if dropped is None or dropped[0] != generation:
            dropped = (generation, [])
            self._dropped[tp] = dropped
        # In offset order, each once (a record dropped, handed out again and dropped again).
        dropped[1][:] = sorted(set(dropped[1]).union(offsets))
        if not dropped[1]:
            del self._dropped[tp]

    def awaiting_dropped(self, tp: Hashable) -> bool:
        """Whether records of ``tp`` dropped unprocessed have yet to come again."""
        return tp in self._dropped

    def forget(self, tps: Iterable[Hashable]) -> None:
        """Partitions revoked: what they handed out no longer bounds what comes next."""
        for tp in tps:
            self._next.pop(tp, None)
            self._dropped.pop(tp, None)
