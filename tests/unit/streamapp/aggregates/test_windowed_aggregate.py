"""Windowed aggregates without a broker: window assignment, grace, late records, closing, expiry.

The processor runs over a dict standing in for the changelog-backed table. "A restart" is a
new processor over a copy of the dict: all it has is what the table (RocksDB, the changelog)
would give back, nothing from memory.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamapp.aggregates import AggregateProcessor, ClosedWindow, Outcome, Windows

P = 0


def counter(windows: Windows, store: dict[str, Any] | None = None) -> AggregateProcessor[int]:
    return AggregateProcessor(
        windows, {} if store is None else store, initial=lambda: 0, fold=lambda n, _v: n + 1
    )


class Feed:
    """Records fed to one processor, offsets counted; closed windows applied after each."""

    def __init__(self, proc: AggregateProcessor[Any], offset: int = 0) -> None:
        self.proc = proc
        self.offset = offset
        self.closed: list[ClosedWindow[Any]] = []
        self.late: list[int] = []

    def send(self, key: str, time_ms: int, value: Any = None) -> Outcome:
        offset = self.offset
        self.offset += 1
        arrival = self.proc.process(P, key, offset, time_ms, value)
        if arrival.outcome is Outcome.LATE:
            self.proc.count_late(P, offset)
            self.late.append(offset)
        expiry = self.proc.plan_expiry(P)
        self.closed.extend(expiry.closed)
        expiry.apply()
        return arrival.outcome

    def results(self) -> dict[tuple[str, int], Any]:
        return {(c.key, c.start_ms): c.value for c in self.closed}


# -- window assignment --


def test_tumbling_windows_hold_each_time_once() -> None:
    w = Windows.tumbling(1_000)
    assert w.starts(0) == [0]
    assert w.starts(999) == [0]
    assert w.starts(1_000) == [1_000]  # end exclusive
    assert w.starts(-1) == [-1_000]
    assert w.end(1_000) == 2_000


def test_hopping_windows_hold_each_time_size_over_step_times() -> None:
    w = Windows.hopping(1_000, 250)
    assert w.starts(1_000) == [250, 500, 750, 1_000]
    assert w.starts(1_249) == [250, 500, 750, 1_000]
    assert w.starts(1_250) == [500, 750, 1_000, 1_250]
    assert all(s <= 1_100 < w.end(s) for s in w.starts(1_100))
    # size not a multiple of step: 2 or 3 windows, each really holding the time.
    odd = Windows.hopping(1_000, 300)
    for t in range(-2_000, 2_000, 7):
        starts = odd.starts(t)
        assert starts == [s for s in range(-3_000, 3_000, 300) if s <= t < s + 1_000]


def test_windows_reject_gaps_and_negative_bounds() -> None:
    with pytest.raises(ValueError, match="step must not exceed size"):
        Windows.hopping(100, 200)
    with pytest.raises(ValueError):
        Windows.tumbling(0)
    with pytest.raises(ValueError):
        Windows.tumbling(100, grace_ms=-1)


def test_a_window_closes_at_end_plus_grace() -> None:
    w = Windows.tumbling(1_000, grace_ms=200)
    assert w.closes_at(0) == 1_200
    assert not w.is_closed(0, 1_199)
    assert w.is_closed(0, 1_200)
    assert not w.is_late(999, 1_199)
    assert w.is_late(999, 1_200)


# -- folding, grace, late records --


def test_counts_per_key_and_window() -> None:
    feed = Feed(counter(Windows.tumbling(1_000, grace_ms=100)))
    for key, t in [("a", 10), ("a", 990), ("b", 500), ("a", 1_010)]:
        assert feed.send(key, t) is Outcome.ACCEPTED
    assert feed.proc.windows_of("a") == {0: 2, 1_000: 1}
    assert feed.proc.windows_of("b") == {0: 1}


def test_a_user_fold_sees_the_records_in_offset_order() -> None:
    proc: AggregateProcessor[list[int]] = AggregateProcessor(
        Windows.tumbling(100), {}, initial=list, fold=lambda acc, v: [*acc, v]
    )
    feed = Feed(proc)
    for v, t in [(1, 50), (2, 10), (3, 99)]:
        feed.send("k", t, v)
    assert proc.windows_of("k") == {0: [1, 2, 3]}


def test_grace_admits_out_of_order_records_then_they_are_late() -> None:
    feed = Feed(counter(Windows.tumbling(1_000, grace_ms=500)))
    feed.send("k", 900)
    feed.send("k", 1_400)  # clock 1400: window 0 open until 1500
    assert feed.send("k", 100) is Outcome.ACCEPTED  # within grace
    feed.send("k", 1_500)  # clock reaches 1500: window 0 closes
    assert feed.results() == {("k", 0): 2}
    assert feed.send("k", 100) is Outcome.LATE
    assert feed.late == [4]
    assert feed.proc.late_count(P) == 1
    assert feed.results() == {("k", 0): 2}  # the late record changed nothing


def test_hopping_late_for_its_oldest_windows_only_is_folded_into_the_others() -> None:
    feed = Feed(counter(Windows.hopping(1_000, 500)))
    feed.send("k", 1_600)  # windows 1000 and 1500; clock 1600
    assert feed.send("k", 1_100) is Outcome.ACCEPTED  # in 500 (closed at 1500) and 1000
    assert feed.proc.windows_of("k") == {1_000: 2, 1_500: 1}
    assert feed.proc.late_count(P) == 0


# -- closing and expiry --


def test_a_window_is_emitted_once_final_when_window_plus_grace_has_passed() -> None:
    w = Windows.tumbling(1_000, grace_ms=300)
    feed = Feed(counter(w))
    feed.send("a", 100)
    feed.send("a", 200)
    feed.send("b", 1_299)  # clock 1299: window 0 still open
    assert feed.closed == []
    feed.send("b", 1_300)  # clock 1300 = 0 + 1000 + 300
    assert feed.closed == [ClosedWindow("a", 0, 1_000, 2)]
    feed.send("b", 5_000)
    assert feed.results() == {("a", 0): 2, ("b", 1_000): 2}
    assert len(feed.closed) == 2  # each once


def test_a_closed_window_is_gone_from_the_store() -> None:
    store: dict[str, Any] = {}
    feed = Feed(counter(Windows.hopping(1_000, 500), store))
    for i in range(20):
        feed.send(f"k{i % 3}", i * 100)
    feed.send("z", 100_000)  # every earlier window closed
    assert set(feed.proc.windows_of("z")) == {99_500, 100_000}
    for i in range(3):
        assert feed.proc.windows_of(f"k{i}") == {}
    # Only z's windows, its index entries and the partition's bookkeeping are left.
    assert sorted(store) == ["k/z", "~live/0", "~p/0", "~w/0/100000", "~w/0/99500"]
    assert sum(c.value for c in feed.closed) == 20 * 2  # each record in two windows


def test_after_a_restart_recovered_windows_still_expire() -> None:
    """faust-streaming/faust #385 cannot happen here: the expiry index is table state."""
    store: dict[str, Any] = {}
    before = Feed(counter(Windows.tumbling(1_000, grace_ms=100), store))
    for i in range(10):
        before.send(f"k{i}", 500)
    before.proc.plan_expiry(P)  # a sweep that caches "nothing due before 1100"
    assert before.closed == []
    # A new processor (a restarted worker) over what the table gives back: nothing in memory.
    after = Feed(counter(Windows.tumbling(1_000, grace_ms=100), dict(store)), offset=10)
    after.send("x", 1_100)
    assert after.results() == {(f"k{i}", 0): 1 for i in range(10)}
    assert after.proc.held_starts(P) == [1_000]
    assert all(after.proc.windows_of(f"k{i}") == {} for i in range(10))


def test_a_rebalance_forgets_the_sweep_cache() -> None:
    store: dict[str, Any] = {}
    proc = counter(Windows.tumbling(1_000), store)
    feed = Feed(proc)
    feed.send("a", 1_500)  # cache: nothing due before 2000
    # Another worker's writes to the same partition come in through the changelog.
    other = Feed(counter(Windows.tumbling(1_000), store), offset=1)
    other.proc.process(P, "b", 1, 1_600, None)
    store["~p/0"] = [2_500, 1, 0]
    proc.forget()
    assert proc.plan_expiry(P).closed == (
        ClosedWindow("a", 1_000, 2_000, 1),
        ClosedWindow("b", 1_000, 2_000, 1),
    )


# -- replays (at-least-once) --


def test_a_replayed_record_is_not_folded_twice() -> None:
    store: dict[str, Any] = {}
    proc = counter(Windows.hopping(1_000, 500), store)
    assert proc.process(P, "k", 0, 700, None).outcome is Outcome.ACCEPTED
    # At or below the offset handled last: nothing left to do.
    assert proc.process(P, "k", 0, 700, None).outcome is Outcome.SKIPPED
    # A crash that kept the key's write but lost the bookkeeping write after it: the windows
    # hold the record already.
    store["~p/0"] = [700, -1, 0]
    assert proc.process(P, "k", 0, 700, None).outcome is Outcome.REPLAY
    assert proc.windows_of("k") == {0: 1, 500: 1}


def test_a_replayed_late_record_is_not_counted_again() -> None:
    feed = Feed(counter(Windows.tumbling(100)))
    feed.send("k", 1_000)
    assert feed.send("k", 0) is Outcome.LATE
    assert feed.proc.process(P, "k", 1, 0, None).outcome is Outcome.SKIPPED
    assert feed.proc.late_count(P) == 1


def test_a_window_whose_emission_was_not_applied_is_emitted_again() -> None:
    store: dict[str, Any] = {}
    proc = counter(Windows.tumbling(100), store)
    proc.process(P, "k", 0, 10, None)
    proc.process(P, "k", 1, 150, None)
    first = proc.plan_expiry(P)
    assert first.closed == (ClosedWindow("k", 0, 100, 1),)
    # Crash before apply (the output may not be delivered): a restart finds it again.
    again = counter(Windows.tumbling(100), dict(store)).plan_expiry(P)
    assert again.closed == first.closed


# -- the whole: equal to a batch computation --


def batch(
    windows: Windows, records: list[tuple[str, int]]
) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int], set[int]]:
    """Per key and window: counts of the closed windows and of those still open; late offsets.

    Straight from the rule: a record counts in a window when the partition's clock (the
    highest time up to and including it) has not reached the window's close.
    """
    clock = -(2**62)
    counts: dict[tuple[str, int], int] = defaultdict(int)
    late: set[int] = set()
    for offset, (key, t) in enumerate(records):
        clock = max(clock, t)
        starts = [s for s in windows.starts(t) if clock < windows.closes_at(s)]
        if not starts:
            late.add(offset)
        for s in starts:
            counts[(key, s)] += 1
    closed = {kw: n for kw, n in counts.items() if windows.is_closed(kw[1], clock)}
    still = {kw: n for kw, n in counts.items() if kw not in closed}
    return closed, still, late


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(1, 50),
    steps=st.integers(1, 5),
    grace=st.integers(0, 60),
    records=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 400)), max_size=60),
    restart_at=st.integers(0, 60),
)
def test_equals_a_batch_computation_across_a_restart(
    size: int, steps: int, grace: int, records: list[tuple[str, int]], restart_at: int
) -> None:
    windows = Windows.hopping(size, max(1, size // steps), grace_ms=grace)
    store: dict[str, Any] = {}
    feed = Feed(counter(windows, store))
    closed: list[ClosedWindow[Any]] = []
    for i, (key, t) in enumerate(records):
        if i == restart_at:
            closed.extend(feed.closed)
            store = dict(store)  # what the table gives back; nothing from memory
            feed = Feed(counter(windows, store), offset=feed.offset)
        feed.send(key, t)
    closed.extend(feed.closed)
    want_closed, want_open, want_late = batch(windows, records)
    got = {(c.key, c.start_ms): c.value for c in closed}
    assert len(got) == len(closed)  # each window emitted once
    assert got == want_closed
    held = {(k, s): n for k in "abc" for s, n in feed.proc.windows_of(k).items()}
    assert held == want_open
    assert feed.proc.late_count(P) == len(want_late)
