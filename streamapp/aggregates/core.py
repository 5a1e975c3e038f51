"""The windowed aggregate's state machine over one key-value store: pure, no Faust, no I/O.

`AggregateProcessor` folds each record into its key's open tumbling or hopping windows in a
store (a ``MutableMapping``: a Faust table in a worker, a dict in tests), one partition at a
time, and says which windows the partition's clock has closed. Session and sliding windows
have processors of their own (`streamapp.aggregates.sessions`, `streamapp.aggregates.sliding`)
on the same bookkeeping (`PartitionBook`). The wiring (`streamapp.aggregates.windowed`) only
decodes, sends and flushes.

What the store holds, per partition ``p`` (every value JSON-friendly):

* ``k/<key>``: the key's open windows, ``{"<start>": [accumulator, last offset folded]}``
  (``[..., ids]`` when records have ids: those folded into the window). All of a record's
  windows (several, for hopping windows) change in one write, so a crash never leaves a
  record folded into some of them only;
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
processed again after a crash is not folded twice into a window that kept it (``REPLAY``). A
record at or below ``seen`` was folded into windows since closed and emitted, or was late (its
dead letter was delivered before ``seen`` moved): it is ``SKIPPED``, not counted late again.
Windows are deleted only after their results were delivered (the wiring flushes the producer
between `AggregateProcessor.plan_expiry` and `Expiry.apply`), so a crash re-emits a closed
window's result at worst (a duplicate), never loses it.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from streamapp.aggregates.window import Windows
from streamapp.joins.outcome import Arrival, Expiry, Outcome
from streamapp.slot_index import SlotIndex

__all__ = [
    "AggregateProcessor",
    "Arrival",
    "ClosedWindow",
    "Expiry",
    "Outcome",
    "PartitionBook",
    "Store",
]

Store = MutableMapping[str, Any]
A = TypeVar("A")

KEY_PREFIX = "k/"
#: Below any event time: the clock of a partition before its first record.
NO_CLOCK = -(2**62)


@dataclass(frozen=True)
class ClosedWindow(Generic[A]):
    """A window's final result: ``key`` (as stored), ``[start_ms, end_ms)``, its value."""

    key: str
    start_ms: int
    end_ms: int
    value: A


def _part_key(p: int) -> str:
    return f"~p/{p}"


def is_book_key(key: str) -> bool:
    """Whether ``key`` is a partition's bookkeeping entry (``~p/<p>``): a batch writes it after
    the rest, so that a record is marked handled only after what it changed."""
    return key.startswith("~p/")


#: The expiry index: one slot a window start.
INDEX = SlotIndex("~w")


class PartitionBook:
    """Each partition's clock, highest offset handled and late count (``~p/<p>``), over
    ``store``; what every aggregate processor keeps the same way."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def part(self, partition: int) -> tuple[int, int, int]:
        """``(clock, seen, late)`` of ``partition`` (a clock below any time before any record)."""
        raw = self.store.get(_part_key(partition))
        if raw is None:
            return NO_CLOCK, -1, 0
        clock, seen, late = raw
        return int(clock), int(seen), int(late)

    def set_part(self, partition: int, clock: int, seen: int, late: int) -> None:
        """Write ``partition``'s clock, highest offset handled and late count."""
        self.store[_part_key(partition)] = [clock, seen, late]

    def clock(self, partition: int) -> int | None:
        """The partition's clock, None before its first record."""
        raw = self.store.get(_part_key(partition))
        return None if raw is None else int(raw[0])

    def late_count(self, partition: int) -> int:
        """How many late records ``partition`` had."""
        return self.part(partition)[2]

    def count_late(self, partition: int, offset: int) -> None:
        """Count a late record as handled (after its dead letter, if any, was delivered)."""
        clock, seen, late = self.part(partition)
        self.set_part(partition, clock, max(seen, offset), late + 1)

    def mark_seen(self, partition: int, clock: int, offset: int) -> None:
        """Note ``offset`` handled and ``clock`` the partition's clock."""
        _old, seen, late = self.part(partition)
        self.set_part(partition, clock, max(seen, offset), late)


class AggregateProcessor(PartitionBook, Generic[A]):
    """Tumbling or hopping windows: per key and window, ``fold(...fold(initial(), v1)...,
    vn)`` of the records in it, in offset order (see the module).

    ``windows``: a `Windows`; ``store``: where the state lives; ``initial()``: a new window's
    accumulator; ``fold(accumulator, value)``: the next one.
    """

    def __init__(
        self,
        windows: Windows,
        store: Store,
        *,
        initial: Callable[[], A],
        fold: Callable[[A, Any], A],
    ) -> None:
        super().__init__(store)
        self.windows = windows
        self.initial = initial
        self.fold = fold
        # partition -> the clock value at which a sweep can next find a window closed (None:
        # nothing held). Saves reading the index on every record; `forget` drops it when the
        # store may have changed under it (a rebalance, a recovery).
        self._sweep_at: dict[int, int | None] = {}

    def forget(self) -> None:
        """Drop what is cached from the store (after a rebalance, or a batch not written)."""
        self._sweep_at.clear()

    # -- reading --

    def windows_of(self, key: str) -> dict[int, A]:
        """The key's windows still held (open, or closed and not swept yet): start -> value."""
        held = self.store.get(KEY_PREFIX + key) or {}
        return {int(start): slot[0] for start, slot in sorted(held.items(), key=_by_start)}

    def held_starts(self, partition: int) -> list[int]:
        """The starts of the windows of ``partition`` still held, oldest first."""
        return INDEX.live(self.store, partition)

    # -- one record --

    def process(
        self,
        partition: int,
        key: str,
        offset: int,
        time_ms: int,
        value: Any,
        *,
        id: str | None = None,
        held: Any = None,
    ) -> Arrival[int]:
        """Fold one record (its ``offset``, event time, decoded ``value`` and ``id``) into its
        key's open windows; returns its outcome and the windows it went in. ``held`` is not
        used (sliding windows keep it)."""
        clock, seen, late = self.part(partition)
        if offset <= seen:
            return Arrival(Outcome.SKIPPED)
        clock = max(clock, time_ms)
        starts = self.windows.open_starts(time_ms, clock)
        if not starts:
            # Nothing is written: `count_late` does it once the dead letter is out.
            return Arrival(Outcome.LATE)
        slots: dict[str, list[Any]] = dict(self.store.get(KEY_PREFIX + key) or {})
        folded: list[int] = []
        holding = 0
        for start in starts:
            slot = slots.get(str(start))
            if slot is None:
                acc = self.fold(self.initial(), value)
                slots[str(start)] = _slot(acc, offset, [] if id is None else [id])
                self._index(partition, key, start)
                folded.append(start)
            elif int(slot[1]) >= offset:
                # This window holds the record already (a replay after a crash that lost the
                # ``seen`` write but not this key's).
                holding += 1
            elif id is not None and id in _ids(slot):
                continue  # a duplicate for this window
            else:
                ids = _ids(slot) + ([] if id is None else [id])
                slots[str(start)] = _slot(self.fold(slot[0], value), offset, ids)
                folded.append(start)
        if folded:
            self.store[KEY_PREFIX + key] = slots
        self.set_part(partition, clock, offset, late)
        if folded:
            return Arrival(Outcome.ACCEPTED, tuple(folded))
        return Arrival(Outcome.REPLAY if holding else Outcome.DUPLICATE)

    # -- expiry --

    def _index(self, partition: int, key: str, start: int) -> None:
        INDEX.add(self.store, partition, start, key)
        if partition in self._sweep_at:
            at = self._sweep_at[partition]
            due = self.windows.closes_at(start)
            self._sweep_at[partition] = due if at is None else min(at, due)

    def plan_expiry(self, partition: int) -> Expiry[ClosedWindow[A]]:
        """The windows of ``partition`` its clock has closed, with their final values.

        The store changes on `apply`, which the caller runs once the results are delivered.
        """
        expiry: Expiry[ClosedWindow[A]] = Expiry()
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
                slots = updates.get(key)
                if slots is None:
                    slots = dict(self.store.get(KEY_PREFIX + key) or {})
                slot = slots.pop(str(start), None)
                if slot is None:
                    continue
                updates[key] = slots
                closed.append(ClosedWindow(key, start, self.windows.end(start), slot[0]))

        def apply() -> None:
            for key, slots in updates.items():
                if slots:
                    self.store[KEY_PREFIX + key] = slots
                elif KEY_PREFIX + key in self.store:
                    del self.store[KEY_PREFIX + key]
            INDEX.drop(self.store, partition, due, rest)
            self._sweep_at[partition] = self.windows.closes_at(rest[0]) if rest else None

        expiry.emitted = tuple(closed)
        expiry.then(apply)
        return expiry


def _slot(acc: Any, offset: int, ids: list[str]) -> list[Any]:
    # Without ids a slot keeps the two-item shape of stores written before ids existed.
    return [acc, offset, ids] if ids else [acc, offset]


def _ids(slot: list[Any]) -> list[str]:
    return list(slot[2]) if len(slot) > 2 else []


def _by_start(item: tuple[str, Any]) -> int:
    return int(item[0])
