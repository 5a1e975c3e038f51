"""Session windows without a broker: sessions, merging, grace, late records, closing, replays.

The processor runs over a dict standing in for the changelog-backed table. "A restart" is a
new processor over a copy of the dict: all it has is what the table would give back.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamapp.aggregates import ClosedWindow, Outcome, SessionProcessor, SessionWindows, Windows
from streamapp.aggregates.core import is_book_key
from streamapp.joins.core import ExpiryIndex
from streamapp.joins.write_back import WriteBack

P = 0


def offsets(windows: SessionWindows, store: Any, bucket_ms: int = 1) -> SessionProcessor[list[int]]:
    """Each session's value: the offsets of its records, in order (fold appends the record's
    offset, its value here; merge keeps them sorted)."""
    return SessionProcessor(
        windows,
        store,
        initial=list,
        fold=lambda acc, offset: [*acc, offset],
        merge=lambda a, b: sorted(a + b),
        index=ExpiryIndex(bucket_ms),
    )


class Feed:
    """Records fed to one processor, offsets counted; closed sessions applied after each."""

    def __init__(self, proc: SessionProcessor[Any], offset: int = 0) -> None:
        self.proc = proc
        self.offset = offset
        self.closed: list[ClosedWindow[Any]] = []

    def send(self, key: str, time_ms: int, record_id: str | None = None) -> Outcome:
        offset = self.offset
        self.offset += 1
        arrival = self.proc.process(P, key, offset, time_ms, offset, id=record_id)
        if arrival.outcome is Outcome.LATE:
            self.proc.count_late(P, offset)
        self.sweep()
        return arrival.outcome

    def sweep(self) -> None:
        expiry = self.proc.plan_expiry(P)
        self.closed.extend(expiry.emitted)
        expiry.apply()

    def results(self) -> dict[tuple[str, int, int], Any]:
        return {(c.key, c.start_ms, c.end_ms): c.value for c in self.closed}


def test_session_windows_reject_a_gap_of_zero_and_negative_grace() -> None:
    assert Windows.session(10, grace_ms=5) == SessionWindows(10, 5)
    with pytest.raises(ValueError):
        Windows.session(0)
    with pytest.raises(ValueError):
        Windows.session(10, grace_ms=-1)


def test_the_rule_at_its_bounds() -> None:
    w = Windows.session(100, grace_ms=50)
    assert w.reaches(1_000, 1_200, 900) and w.reaches(1_000, 1_200, 1_300)
    assert not w.reaches(1_000, 1_200, 899) and not w.reaches(1_000, 1_200, 1_301)
    assert not w.is_late(1_000, 1_050) and w.is_late(999, 1_050)
    assert w.closes_at(1_200) == 1_351  # one past 1200 + 100 + 50: a record at 1300 can come


def test_records_within_the_gap_make_one_session_and_it_closes_after_gap_and_grace() -> None:
    w = Windows.session(100, grace_ms=50)
    feed = Feed(offsets(w, {}))
    assert feed.send("k", 1_000) is Outcome.ACCEPTED
    feed.send("k", 1_100)  # exactly the gap: the same session
    feed.send("k", 1_201)  # more than the gap: a new one
    assert feed.proc.windows_of("k") == {1_000: [0, 1], 1_201: [2]}
    # [1000, 1100] closes at 1100 + 1 + 100 + 50.
    assert w.closes_at(1_100) == 1_251
    feed.send("other", 1_250)
    assert feed.closed == []
    feed.send("other", 1_251)
    assert feed.results() == {("k", 1_000, 1_101): [0, 1]}


def test_an_out_of_order_record_within_grace_merges_two_sessions() -> None:
    feed = Feed(offsets(Windows.session(10, grace_ms=100), {}))
    feed.send("k", 100)
    feed.send("k", 120)  # 20 apart: two sessions
    assert feed.proc.windows_of("k") == {100: [0], 120: [1]}
    assert feed.send("k", 110) is Outcome.ACCEPTED  # within 10 of both: one session
    assert feed.proc.windows_of("k") == {100: [0, 1, 2]}
    feed.send("z", 1_000)
    assert feed.results() == {("k", 100, 121): [0, 1, 2]}


def test_merge_combines_the_values_oldest_first_then_folds_the_record() -> None:
    calls: list[tuple[Any, Any]] = []

    def merge(a: str, b: str) -> str:
        calls.append((a, b))
        return a + b

    proc: SessionProcessor[str] = SessionProcessor(
        Windows.session(10, grace_ms=100),
        {},
        initial=str,
        fold=lambda acc, v: acc + v,
        merge=merge,
    )
    proc.process(P, "k", 0, 120, "b")
    proc.process(P, "k", 1, 100, "a")
    proc.process(P, "k", 2, 140, "c")
    proc.process(P, "k", 3, 130, "+")  # joins [120] and [140]... and [100]? 100 is 30 away: no
    assert proc.windows_of("k") == {100: "a", 120: "bc+"}
    assert calls == [("b", "c")]


def test_a_record_more_than_grace_behind_the_clock_is_late_even_near_an_open_session() -> None:
    feed = Feed(offsets(Windows.session(100, grace_ms=0), {}))
    feed.send("k", 1_000)
    feed.send("j", 1_050)  # clock 1050; k's session open until 1101
    assert feed.send("k", 1_040) is Outcome.LATE
    assert feed.proc.late_count(P) == 1
    assert feed.proc.windows_of("k") == {1_000: [0]}
    # Processed again after a crash: skipped, not counted twice.
    assert feed.proc.process(P, "k", 2, 1_040, 2).outcome is Outcome.SKIPPED
    assert feed.proc.late_count(P) == 1


def test_a_record_whose_session_write_survived_a_crash_is_a_replay() -> None:
    store: dict[str, Any] = {}
    proc = offsets(Windows.session(10), store)
    proc.process(P, "k", 0, 100, 0)
    store["~p/0"] = [100, -1, 0]  # the bookkeeping write after the key's was lost
    assert proc.process(P, "k", 0, 100, 0).outcome is Outcome.REPLAY
    assert proc.windows_of("k") == {100: [0]}


def test_a_record_with_the_id_of_one_in_an_open_session_is_a_duplicate() -> None:
    feed = Feed(offsets(Windows.session(10, grace_ms=100), {}))
    feed.send("k", 100, "x")
    assert feed.send("k", 105, "x") is Outcome.DUPLICATE
    assert feed.send("k", 200, "x") is Outcome.DUPLICATE  # any open session of the key
    assert feed.send("k", 105, "y") is Outcome.ACCEPTED
    assert feed.proc.windows_of("k") == {100: [0, 3]}
    feed.send("z", 10_000)
    assert feed.send("k", 10_000, "x") is Outcome.ACCEPTED  # its session closed: new again


def test_sessions_held_after_a_restart_still_close() -> None:
    store: dict[str, Any] = {}
    before = Feed(offsets(Windows.session(10), store))
    for i in range(5):
        before.send(f"k{i}", 100 + i)
    after = Feed(offsets(Windows.session(10), dict(store)), offset=before.offset)
    after.send("z", 1_000)
    assert {c.key for c in after.closed} == {f"k{i}" for i in range(5)}
    assert all(after.proc.windows_of(f"k{i}") == {} for i in range(5))


def test_with_wider_buckets_sessions_close_up_to_a_bucket_later_and_the_same() -> None:
    exact = Feed(offsets(Windows.session(10), {}, bucket_ms=1))
    wide = Feed(offsets(Windows.session(10), {}, bucket_ms=50))
    for feed in (exact, wide):
        feed.send("k", 100)
        feed.send("z", 111)  # k's session [100, 100] closes at 111
    assert [c.key for c in exact.closed] == ["k"]
    assert wide.closed == []  # its bucket [100, 150) is due at 150
    for feed in (exact, wide):
        feed.send("y", 150)
    assert wide.results() == exact.results() == {("k", 100, 101): [0], ("z", 111, 112): [1]}


# -- the whole: equal to a batch computation --


def batch_sessions(
    windows: SessionWindows, records: list[tuple[str, int]]
) -> tuple[dict[tuple[str, int, int], list[int]], set[int], int]:
    """The sessions of the records that are not late, their offsets; the late offsets; the
    final clock. Straight from the rule: late is more than grace behind the clock (the highest
    time before it); a key's other records, sorted by time, cut where two are more than
    ``gap_ms`` apart."""
    clock = -(2**62)
    late: set[int] = set()
    kept: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for offset, (key, t) in enumerate(records):
        if windows.is_late(t, clock):
            late.add(offset)
            continue
        clock = max(clock, t)
        kept[key].append((t, offset))
    sessions: dict[tuple[str, int, int], list[int]] = {}
    for key, held in kept.items():
        held.sort()
        run = [held[0]]
        for t, offset in held[1:]:
            if t - run[-1][0] > windows.gap_ms:
                sessions[(key, run[0][0], run[-1][0] + 1)] = sorted(o for _, o in run)
                run = []
            run.append((t, offset))
        sessions[(key, run[0][0], run[-1][0] + 1)] = sorted(o for _, o in run)
    return sessions, late, clock


def walk(steps: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Records whose times move by the steps given (back or forward): out of order, and often
    exactly a gap or a grace apart."""
    t = 1_000
    out = []
    for key, step in steps:
        t += step
        out.append((key, t))
    return out


@settings(max_examples=400, deadline=None)
@given(
    gap=st.integers(1, 10),
    grace=st.integers(0, 20),
    bucket=st.integers(1, 30),
    steps=st.lists(st.tuples(st.sampled_from("ab"), st.integers(-12, 12)), min_size=1, max_size=60),
    batch_sizes=st.lists(st.integers(1, 8), min_size=1, max_size=20),
    restart_at=st.integers(0, 20),
)
def test_equals_a_batch_computation_over_batches_and_a_restart(
    gap: int,
    grace: int,
    bucket: int,
    steps: list[tuple[str, int]],
    batch_sizes: list[int],
    restart_at: int,
) -> None:
    records = walk(steps)
    windows = Windows.session(gap, grace_ms=grace)
    store: dict[str, Any] = {}
    proc = offsets(windows, WriteBack(store), bucket)
    closed: list[ClosedWindow[list[int]]] = []
    offset = 0
    batch_no = 0
    while offset < len(records):
        if batch_no == restart_at:
            store = dict(store)  # what the table gives back; nothing from memory
            proc = offsets(windows, WriteBack(store), bucket)
        size = batch_sizes[batch_no % len(batch_sizes)]
        for key, t in records[offset : offset + size]:
            if proc.process(P, key, offset, t, offset).outcome is Outcome.LATE:
                proc.count_late(P, offset)
            offset += 1
        expiry = proc.plan_expiry(P)
        closed.extend(expiry.emitted)
        expiry.apply()
        assert isinstance(proc.store, WriteBack)
        proc.store.write_through(last=is_book_key)
        batch_no += 1
    want, late, clock = batch_sessions(windows, records)
    got = {(c.key, c.start_ms, c.end_ms): c.value for c in closed}
    assert len(got) == len(closed)  # each session emitted once
    held = {(key, int(s[0]), int(s[1]) + 1): s[2] for key in "abc" for s in proc.sessions(key)}
    assert not set(got) & set(held)
    assert {**got, **held} == want
    # Emitted exactly the sessions the final clock has closed (by the buckets' rule).
    index = ExpiryIndex(bucket)
    assert set(got) == {s for s in want if index.swept(windows.closes_at(s[2] - 1) - 1, clock)}
    assert proc.late_count(P) == len(late)
