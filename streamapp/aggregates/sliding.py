"""Sliding windows' state machine over one key-value store: pure, no Faust, no I/O.

One window per distinct event time ``t`` of a key's records, ``[t - size_ms, t]`` (see
`streamapp.aggregates.window.SlidingWindows`), whose value is the fold, in offset order, of the
key's records in that range. The first record of time ``t`` opens the window: its value is
folded from the records of the key held in range (the processor keeps each record while a
window still to come may hold it, ``size_ms + grace_ms`` past its time), then the record itself;
each later record in range is folded into it while it is open. A window closes once the clock
reaches ``t + 1 + grace_ms`` and its value is emitted. A record more than ``grace_ms`` behind the
clock is late (the window it ends is closed).

Deterministic: for the records of a partition in offset order, the windows closed are those of
a batch computation over the records that are not late (for each time ``t`` of one of them, the
fold of those in ``[t - size_ms, t]`` in offset order), whatever the batches, sweeps and
restarts (tests/unit/streamapp/aggregates/test_sliding.py checks it with Hypothesis).

What the store holds, per partition ``p``:

* ``k/<key>``: ``{"r": [[time, offset, value as held, id], ...], "w": {"<t>": [value, last
  offset]}}``: the records kept (offset order) and the windows held, by the time that ends them;
* ``~p/<p>``: clock, highest offset handled, late count (`streamapp.aggregates.core.PartitionBook`);
* ``~live/<p>`` and ``~l/<p>/<bucket>``: the expiry index, the keys holding a window that closes
  or a record that is dropped in each time bucket.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from streamapp.aggregates.core import KEY_PREFIX, ClosedWindow, PartitionBook, Store
from streamapp.aggregates.window import SlidingWindows
from streamapp.joins.core import ExpiryIndex
from streamapp.joins.outcome import Arrival, Expiry, Outcome
from streamapp.slot_index import SlotIndex

__all__ = ["SlidingProcessor"]

A = TypeVar("A")

#: The expiry index: one slot a time bucket of closing or dropping.
SLIDING = SlotIndex("~l")


def _identity(value: Any) -> Any:
    return value


class SlidingProcessor(PartitionBook, Generic[A]):
    """Sliding windows over ``store`` (see the module).

    ``initial()``: a new window's value; ``fold(value, record_value)``: the next one;
    ``restore(held)``: a kept record's value from what `process` was given as ``held`` (the
    record's value by default); ``index``: the time buckets in which windows are swept (a
    window's value is emitted up to a bucket's width after it closed; 1 ms is exact).
    """

    def __init__(
        self,
        windows: SlidingWindows,
        store: Store,
        *,
        initial: Callable[[], A],
        fold: Callable[[A, Any], A],
        restore: Callable[[Any], Any] = _identity,
        index: ExpiryIndex | None = None,
    ) -> None:
        super().__init__(store)
        self.windows = windows
        self.initial = initial
        self.fold = fold
        self.restore = restore
        self.index = index or ExpiryIndex(1)
        self._sweep_at: dict[int, int | None] = {}

    def forget(self) -> None:
        """Drop what is cached from the store (after a rebalance, or a batch not written)."""
        self._sweep_at.clear()

    # -- reading --

    def _entry(self, key: str) -> tuple[list[list[Any]], dict[str, list[Any]]]:
        raw = self.store.get(KEY_PREFIX + key) or {}
        return [list(r) for r in raw.get("r", ())], dict(raw.get("w", {}))

    def windows_of(self, key: str) -> dict[int, A]:
        """The key's windows held (open, or closed and not swept yet): start -> value."""
        _records, windows = self._entry(key)
        size = self.windows.size_ms
        return {int(end) - size: slot[0] for end, slot in sorted(windows.items(), key=_by_end)}

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
        """Fold one record into its key's open windows that hold it, opening the one it ends;
        returns its outcome and the ends of the windows it went in. ``held``: what to keep of
        the record for windows still to come (JSON-friendly; `restore` reads it back; the
        value itself when None)."""
        clock, seen, _late = self.part(partition)
        if offset <= seen:
            return Arrival(Outcome.SKIPPED)
        records, windows = self._entry(key)
        if any(int(r[1]) >= offset for r in records):
            self.mark_seen(partition, clock, offset)
            return Arrival(Outcome.REPLAY)  # kept already: a crash lost the ``seen`` write
        w = self.windows
        if w.is_late(time_ms, clock):
            return Arrival(Outcome.LATE)  # `count_late` writes, once the dead letter is out
        clock = max(clock, time_ms)
        records = [r for r in records if clock < w.held_until(int(r[0]))]
        if id is not None and any(r[3] == id for r in records):
            self.mark_seen(partition, clock, offset)
            return Arrival(Outcome.DUPLICATE)
        went: list[int] = []
        for end, slot in windows.items():
            end_ms = int(end)
            if w.contains(end_ms, time_ms) and clock < w.closes_at(end_ms):
                windows[end] = [self.fold(slot[0], value), offset]
                went.append(end_ms)
        if str(time_ms) not in windows:
            acc = self.initial()
            for r in records:
                if w.contains(time_ms, int(r[0])):
                    acc = self.fold(acc, self.restore(r[2]))
            windows[str(time_ms)] = [self.fold(acc, value), offset]
            went.append(time_ms)
            self._index(partition, key, w.closes_at(time_ms))
        records.append([time_ms, offset, value if held is None else held, id])
        self._index(partition, key, w.held_until(time_ms))
        self.store[KEY_PREFIX + key] = {"r": records, "w": windows}
        self.mark_seen(partition, clock, offset)
        return Arrival(Outcome.ACCEPTED, tuple(sorted(went)))

    # -- expiry --

    def _index(self, partition: int, key: str, due_at: int) -> None:
        bucket = self.index.bucket_of(due_at - 1)
        SLIDING.add(self.store, partition, bucket, key)
        if partition in self._sweep_at:
            at = self._sweep_at[partition]
            due = self.index.due_at(bucket)
            self._sweep_at[partition] = due if at is None else min(at, due)

    def plan_expiry(self, partition: int) -> Expiry[ClosedWindow[A]]:
        """The windows of ``partition`` its clock has closed (by the index's buckets), with
        their values; the store changes on `apply` (the closed windows and the records no
        window can hold any more go), once they are delivered."""
        expiry: Expiry[ClosedWindow[A]] = Expiry()
        clock = self.clock(partition)
        if clock is None:
            return expiry
        at = self._sweep_at.get(partition, clock)
        if at is None or clock < at:
            return expiry
        live = SLIDING.live(self.store, partition)
        due = [b for b in live if self.index.due_at(b) <= clock]
        rest = live[len(due) :]
        if not due:
            self._sweep_at[partition] = self.index.due_at(rest[0]) if rest else None
            return expiry
        keys: list[str] = []
        for bucket in due:
            keys.extend(k for k in SLIDING.keys(self.store, partition, bucket) if k not in keys)
        w = self.windows
        swept = self.index.swept
        closed: list[ClosedWindow[A]] = []
        updates: dict[str, dict[str, Any]] = {}
        for key in keys:
            records, windows = self._entry(key)
            kept_records = [r for r in records if not swept(w.held_until(int(r[0])) - 1, clock)]
            kept_windows = {
                end: slot
                for end, slot in windows.items()
                if not swept(w.closes_at(int(end)) - 1, clock)
            }
            if len(kept_records) == len(records) and len(kept_windows) == len(windows):
                continue
            updates[key] = {"r": kept_records, "w": kept_windows}
            for end, slot in sorted(windows.items(), key=_by_end):
                if end not in kept_windows:
                    end_ms = int(end)
                    closed.append(ClosedWindow(key, end_ms - w.size_ms, end_ms + 1, slot[0]))

        def apply() -> None:
            for key, entry in updates.items():
                if entry["r"] or entry["w"]:
                    self.store[KEY_PREFIX + key] = entry
                elif KEY_PREFIX + key in self.store:
                    del self.store[KEY_PREFIX + key]
            SLIDING.drop(self.store, partition, due, rest)
            self._sweep_at[partition] = self.index.due_at(rest[0]) if rest else None

        expiry.emitted = tuple(closed)
        expiry.then(apply)
        return expiry


def _by_end(item: tuple[str, Any]) -> int:
    return int(item[0])
