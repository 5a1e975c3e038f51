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
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from enum import Enum


class Refusal(Enum):
    STALE_GENERATION = "fetched in an earlier generation"
    ALREADY_HANDED_OUT = "handed out already in this generation"


class HandOutLedger:
    """Per partition, the generation and the next offset a record may have to be handed out."""

    def __init__(self) -> None:
        self._next: dict[Hashable, tuple[int | None, int]] = {}
        self.refused = 0

    def admit(
        self, tp: Hashable, offset: int, generation: int | None, current_generation: int
    ) -> Refusal | None:
        """None if the record may go to the streams (and is then counted as handed out)."""
        if generation != current_generation:
            self.refused += 1
            return Refusal.STALE_GENERATION
        seen = self._next.get(tp)
        if seen is not None and seen[0] == generation and offset < seen[1]:
            self.refused += 1
            return Refusal.ALREADY_HANDED_OUT
        self._next[tp] = (generation, offset + 1)
        return None

    def forget(self, tps: Iterable[Hashable]) -> None:
        """Partitions revoked: what they handed out no longer bounds what comes next."""
        for tp in tps:
            self._next.pop(tp, None)
