"""The windowed aggregate's state machine over one key-value store: pure, no Faust, no I/O.

`AggregateProcessor` folds each record into its key's open windows in a store (a
``MutableMapping``: a Faust table in a worker, a dict in tests), one partition at a time, and
says which windows the partition's clock has closed. The wiring
(`streamapp.aggregates.windowed`) only decodes, sends and flushes.

What the store holds, per partition ``p`` (every value JSON-friendly):

* ``k/<key>``: the key's open windows, ``{"<start>": [accumulator, last offset folded]}``.
  All of a record's windows (several, for hopping windows) change in one write, so a crash
  never leaves a record folded into some of them only;
* ``~p/<p>``: ``[clock, seen, late]``: the highest event time seen, the highest source offset
  handled (folded or counted late), and how many late records there were. One write per record;
* ``~live/<p>`` and ``~w/<p>/<start>``: the expiry index, the starts of the windows still held
  and, per start, the keys that hold one, so a sweep reads only what has closed
  (`streamapp.slot_index`, shared with the joins).

Everything expiry needs is in the store, so it is in the changelog and in RocksDB, and comes
back with them after a restart or a move: nothing is kept in memory that a recovery would have
to rebuild (Faust's windowed tables keep their expiry heap in memory only, which is why their
windows never expire after a recovery, faust-streaming/faust #385). `_sweep_at` is a cache of
the index, dropped on every rebalance.

Replays (at-least-once). A window's ``last offset`` says which records it holds: a record
processed again after a crash is not folded twice into a window that kept it. A record at or
below ``seen`` whose windows are gone was folded into windows since closed and emitted, or was
late (its dead letter was delivered before ``seen`` moved): it is skipped, not counted late
again. Windows are deleted only after their results were delivered (the wiring flushes the
producer between `AggregateProcessor.plan_expiry` and `Expiry.apply`), so a crash re-emits a
closed window's result at worst (a duplicate), never loses it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from streamapp.aggregates.window import Windows
from streamapp.slot_index import PlannedSweep, SlotIndex

__all__ = [
    "AggregateProcessor",
    "Arrival",
    "ClosedWindow",
    "Expiry",
    "Outcome",
    "Store",
]

Store = MutableMapping[str, Any]
A = TypeVar("A")

KEY_PREFIX = "k/"


class Outcome(enum.Enum):
    ACCEPTED = "accepted"  # folded into its open windows
    LATE = "late"  # all its windows closed: changes nothing
    REPLAY = "replay"  # handled before (at or below ``seen``): nothing left to do


@dataclass(frozen=True)
class Arrival:
    outcome: Outcome
    starts: tuple[int, ...] = ()  # the windows the record was folded into


@dataclass(frozen=True)
class ClosedWindow(Generic[A]):
    """A window's final result."""

    key: str
    start_ms: int
    end_ms: int
    value: A


@dataclass
class Expiry(PlannedSweep, Generic[A]):
    """What a sweep found; nothing is changed until `apply` (after the results are sent)."""

    closed: tuple[ClosedWindow[A], ...] = ()


def _part_key(p: int) -> str:
    return f"~p/{p}"


#: The expiry index: one slot a window start.
INDEX = SlotIndex("~w")


class AggregateProcessor(Generic[A]):
    """Per key and window, ``fold(...fold(initial(), v1)..., vn)`` of the records in it."""

    def __init__(
        self,
        windows: Windows,
        store: Store,
        *,
        initial: Callable[[], A],
        fold: Callable[[A, Any], A],
    ) -> None:
        self.windows = windows
        self.store = store
        self.initial = initial
        self.fold = fold
        # partition -> the clock value at which a sweep can next find a window closed (None:
        # nothing held). Saves reading the index on every record; `forget` drops it when the
        # store may have changed under it (a rebalance, a recovery).
        self._sweep_at: dict[int, int | None] = {}

    def forget(self) -> None:
        self._sweep_at.clear()

    # -- reading --

    def _part(self, partition: int) -> tuple[int, int, int]:
        raw = self.store.get(_part_key(partition))
        if raw is None:
            return -(2**62), -1, 0  # no clock yet: below any event time
        clock, seen, late = raw
        return int(clock), int(seen), int(late)

    def clock(self, partition: int) -> int | None:
        """The partition's clock, None before its first record."""
        raw = self.store.get(_part_key(partition))
        return None if raw is None else int(raw[0])

    def late_count(self, partition: int) -> int:
        return self._part(partition)[2]

    def windows_of(self, key: str) -> dict[int, A]:
        """The key's windows still held (open, or closed and not swept yet): start -> value."""
        held = self.store.get(KEY_PREFIX + key) or {}
        return {int(start): acc for start, (acc, _offset) in sorted(held.items(), key=_by_start)}

    def held_starts(self, partition: int) -> list[int]:
        return INDEX.live(self.store, partition)

    # -- one record --

    def process(self, partition: int, key: str, offset: int, time_ms: int, value: Any) -> Arrival:
        clock, seen, late = self._part(partition)
        if offset <= seen:
            return Arrival(Outcome.REPLAY)
        clock = max(clock, time_ms)
        starts = self.windows.open_starts(time_ms, clock)
        if not starts:
            # Nothing is written: `count_late` does it once the dead letter is out.
            return Arrival(Outcome.LATE)
        held: dict[str, list[Any]] = dict(self.store.get(KEY_PREFIX + key) or {})
        for start in starts:
            slot = held.get(str(start))
            if slot is None:
                held[str(start)] = [self.fold(self.initial(), value), offset]
                self._index(partition, key, start)
            elif int(slot[1]) < offset:
                held[str(start)] = [self.fold(slot[0], value), offset]
            # else: this window holds the record already (a replay after a crash that lost
            # the ``seen`` write but not this key's).
        self.store[KEY_PREFIX + key] = held
        self.store[_part_key(partition)] = [clock, offset, late]
        return Arrival(Outcome.ACCEPTED, tuple(starts))

    def count_late(self, partition: int, offset: int) -> None:
        """Count a late record as handled (after its dead letter, if any, was delivered)."""
        clock, seen, late = self._part(partition)
        self.store[_part_key(partition)] = [clock, max(seen, offset), late + 1]

    # -- expiry --

    def _index(self, partition: int, key: str, start: int) -> None:
        INDEX.add(self.store, partition, start, key)
        if partition in self._sweep_at:
            at = self._sweep_at[partition]
            due = self.windows.closes_at(start)
            self._sweep_at[partition] = due if at is None else min(at, due)

    def plan_expiry(self, partition: int) -> Expiry[A]:
        """The windows of ``partition`` its clock has closed, with their final values.

        The store changes on `apply`, which the caller runs once the results are delivered.
        """
        expiry: Expiry[A] = Expiry()
        clock = self.clock(partition)
        if clock is None:
            return expiry
        if partition in self._sweep_at:
            at = self._sweep_at[partition]
            if at is None or clock < at:
                return expiry
        live = self.held_starts(partition)
        due = [s for s in live if self.windows.is_closed(s, clock)]
        rest = [s for s in live if not self.windows.is_closed(s, clock)]
        if not due:
            self._sweep_at[partition] = self.windows.closes_at(rest[0]) if rest else None
            return expiry
        closed: list[ClosedWindow[A]] = []
        updates: dict[str, dict[str, list[Any]]] = {}
        for start in due:
            for key in INDEX.keys(self.store, partition, start):
                held = updates.get(key)
                if held is None:
                    held = dict(self.store.get(KEY_PREFIX + key) or {})
                slot = held.pop(str(start), None)
                if slot is None:
                    continue
                updates[key] = held
                closed.append(
                    ClosedWindow(key, start, self.windows.end(start), slot[0]),
                )

        def apply() -> None:
            for key, held in updates.items():
                if held:
                    self.store[KEY_PREFIX + key] = held
                elif KEY_PREFIX + key in self.store:
                    del self.store[KEY_PREFIX + key]
            INDEX.drop(self.store, partition, due, rest)
            self._sweep_at[partition] = self.windows.closes_at(rest[0]) if rest else None

        expiry.closed = tuple(closed)
        expiry.then(apply)
        return expiry


def _by_start(item: tuple[str, Any]) -> int:
    return int(item[0])
