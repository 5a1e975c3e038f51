"""Session windows' state machine over one key-value store: pure, no Faust, no I/O.

A key's records at most ``gap_ms`` apart in event time make one session (see
`streamapp.aggregates.window.SessionWindows`). A record that reaches no open session starts one;
one that reaches a session extends it; one that reaches two or more merges them into one.
A session's value is built as a record arrives: ``fold(initial(), v)`` for a new session,
``fold(value, v)`` for one extended, ``fold(merge(merge(a, b), c), v)`` for sessions ``a``,
``b``, ``c`` (oldest first) merged by the record ``v``. A session closes once the clock reaches
``last + 1 + gap_ms + grace_ms`` and its value is emitted. A record more than ``grace_ms``
behind the clock is late: the session it belongs to may be closed.

Deterministic: for the records of a partition in offset order, the sessions closed are those of
a batch computation over the records that are not late (a key's records sorted by time, cut
where two follow each other by more than ``gap_ms``), whatever the batches, sweeps and restarts
(tests/unit/streamapp/aggregates/test_sessions.py checks it with Hypothesis).

What the store holds, per partition ``p``:

* ``k/<key>``: the key's sessions still held, ``[[first, last, value, last offset, ids], ...]``
  by first time;
* ``~p/<p>``: clock, highest offset handled, late count (`streamapp.aggregates.core.PartitionBook`);
* ``~live/<p>`` and ``~s/<p>/<bucket>``: the expiry index, the keys holding a session that
  closes in each time bucket (`streamapp.joins.core.ExpiryIndex`, `streamapp.slot_index`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from streamapp.aggregates.core import KEY_PREFIX, ClosedWindow, PartitionBook, Store
from streamapp.aggregates.window import SessionWindows
from streamapp.joins.core import ExpiryIndex
from streamapp.joins.outcome import Arrival, Expiry, Outcome
from streamapp.slot_index import SlotIndex

__all__ = ["SessionProcessor"]

A = TypeVar("A")

#: The expiry index: one slot a time bucket of closing.
SESSIONS = SlotIndex("~s")


class SessionProcessor(PartitionBook, Generic[A]):
    """Session windows over ``store`` (see the module).

    ``initial()``: a new session's value; ``fold(value, record_value)``: the next one;
    ``merge(earlier, later)``: two sessions' values when a record joins them; ``index``: the
    time buckets in which sessions are swept (a session's value is emitted up to a bucket's
    width after it closed; 1 ms is exact).
    """

    def __init__(
        self,
        windows: SessionWindows,
        store: Store,
        *,
        initial: Callable[[], A],
        fold: Callable[[A, Any], A],
        merge: Callable[[A, A], A],
        index: ExpiryIndex | None = None,
    ) -> None:
        super().__init__(store)
        self.windows = windows
        self.initial = initial
        self.fold = fold
        self.merge = merge
        self.index = index or ExpiryIndex(1)
        self._sweep_at: dict[int, int | None] = {}

    def forget(self) -> None:
        """Drop what is cached from the store (after a rebalance, or a batch not written)."""
        self._sweep_at.clear()

    # -- reading --

    def sessions(self, key: str) -> list[list[Any]]:
        """The key's sessions held: ``[first, last, value, last offset, ids]``, oldest first."""
        return [list(s) for s in self.store.get(KEY_PREFIX + key) or ()]

    def windows_of(self, key: str) -> dict[int, A]:
        """The key's sessions held (open, or closed and not swept yet): first time -> value."""
        return {int(s[0]): s[2] for s in self.sessions(key)}

    def _open(self, sessions: list[list[Any]], clock: int) -> list[list[Any]]:
        return [s for s in sessions if clock < self.windows.closes_at(int(s[1]))]

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
        """Put one record in its key's sessions; returns its outcome and the first time of the
        session it went in. ``held`` is not used."""
        clock, seen, _late = self.part(partition)
        if offset <= seen:
            return Arrival(Outcome.SKIPPED)
        sessions = self.sessions(key)
        if any(int(s[3]) >= offset for s in sessions):
            # In a session already: a replay after a crash that lost the ``seen`` write.
            self.mark_seen(partition, clock, offset)
            return Arrival(Outcome.REPLAY)
        if self.windows.is_late(time_ms, clock):
            return Arrival(Outcome.LATE)  # `count_late` writes, once the dead letter is out
        clock = max(clock, time_ms)
        open_sessions = self._open(sessions, clock)
        if id is not None and any(id in s[4] for s in open_sessions):
            self.mark_seen(partition, clock, offset)
            return Arrival(Outcome.DUPLICATE)
        # A record that is not late reaches no closed session (its last + gap is behind the
        # clock less the grace), so only open ones can be joined.
        joined = [s for s in open_sessions if self.windows.reaches(int(s[0]), int(s[1]), time_ms)]
        if not joined:
            acc = self.fold(self.initial(), value)
        else:
            merged = joined[0][2]
            for s in joined[1:]:
                merged = self.merge(merged, s[2])
            acc = self.fold(merged, value)
        first = min([time_ms, *(int(s[0]) for s in joined)])
        last = max([time_ms, *(int(s[1]) for s in joined)])
        ids = sorted({i for s in joined for i in s[4]} | ({id} if id is not None else set()))
        rest = [s for s in sessions if s not in joined]
        session = [first, last, acc, offset, ids]
        self.store[KEY_PREFIX + key] = sorted([*rest, session], key=lambda s: int(s[0]))
        self._index(partition, key, self.windows.closes_at(last))
        self.mark_seen(partition, clock, offset)
        return Arrival(Outcome.ACCEPTED, (first,))

    # -- expiry --

    def _index(self, partition: int, key: str, closes_at: int) -> None:
        bucket = self.index.bucket_of(closes_at - 1)
        SESSIONS.add(self.store, partition, bucket, key)
        if partition in self._sweep_at:
            at = self._sweep_at[partition]
            due = self.index.due_at(bucket)
            self._sweep_at[partition] = due if at is None else min(at, due)

    def plan_expiry(self, partition: int) -> Expiry[ClosedWindow[A]]:
        """The sessions of ``partition`` its clock has closed (by the index's buckets), with
        their values; the store changes on `apply`, once they are delivered."""
        expiry: Expiry[ClosedWindow[A]] = Expiry()
        clock = self.clock(partition)
        if clock is None:
            return expiry
        at = self._sweep_at.get(partition, clock)
        if at is None or clock < at:
            return expiry
        live = SESSIONS.live(self.store, partition)
        due = [b for b in live if self.index.due_at(b) <= clock]
        rest = live[len(due) :]
        if not due:
            self._sweep_at[partition] = self.index.due_at(rest[0]) if rest else None
            return expiry
        keys: list[str] = []
        for bucket in due:
            keys.extend(k for k in SESSIONS.keys(self.store, partition, bucket) if k not in keys)
        closed: list[ClosedWindow[A]] = []
        updates: dict[str, list[list[Any]]] = {}
        for key in keys:
            sessions = self.sessions(key)
            # By the bucket rule: what closes when does not depend on which bucket listed it.
            keep = [
                s
                for s in sessions
                if not self.index.swept(self.windows.closes_at(int(s[1])) - 1, clock)
            ]
            if len(keep) == len(sessions):
                continue
            updates[key] = keep
            for s in sessions:
                if s not in keep:
                    closed.append(ClosedWindow(key, int(s[0]), int(s[1]) + 1, s[2]))

        def apply() -> None:
            for key, keep in updates.items():
                if keep:
                    self.store[KEY_PREFIX + key] = keep
                elif KEY_PREFIX + key in self.store:
                    del self.store[KEY_PREFIX + key]
            SESSIONS.drop(self.store, partition, due, rest)
            self._sweep_at[partition] = self.index.due_at(rest[0]) if rest else None

        expiry.emitted = tuple(closed)
        expiry.then(apply)
        return expiry
