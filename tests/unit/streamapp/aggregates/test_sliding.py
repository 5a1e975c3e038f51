"""Sliding windows without a broker: one window per record time, grace, late records, closing.

The processor runs over a dict standing in for the changelog-backed table. "A restart" is a
new processor over a copy of the dict: all it has is what the table would give back.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamapp.aggregates import ClosedWindow, Outcome, SlidingProcessor, SlidingWindows, Windows
from streamapp.aggregates.core import is_book_key
from streamapp.joins.core import ExpiryIndex
from streamapp.joins.write_back import WriteBack

P = 0


def offsets(windows: SlidingWindows, store: Any, bucket_ms: int = 1) -> SlidingProcessor[list[int]]:
    """Each window's value: the offsets of its records in the order folded (a record's value
    is its offset here)."""
    return SlidingProcessor(
        windows,
        store,
        initial=list,
        fold=lambda acc, offset: [*acc, offset],
        index=ExpiryIndex(bucket_ms),
    )


class Feed:
    def __init__(self, proc: SlidingProcessor[Any], offset: int = 0) -> None:
        self.proc = proc
        self.offset = offset
        self.closed: list[ClosedWindow[Any]] = []

    def send(self, key: str, time_ms: int, record_id: str | None = None) -> Outcome:
        offset = self.offset
        self.offset += 1
        arrival = self.proc.process(P, key, offset, time_ms, offset, id=record_id)
        if arrival.outcome is Outcome.LATE:
            self.proc.count_late(P, offset)
        expiry = self.proc.plan_expiry(P)
        self.closed.extend(expiry.emitted)
        expiry.apply()
        return arrival.outcome

    def results(self) -> dict[tuple[str, int, int], Any]:
        return {(c.key, c.start_ms, c.end_ms): c.value for c in self.closed}


def test_the_rule_at_its_bounds() -> None:
    w = Windows.sliding(100, grace_ms=20)
    assert w == SlidingWindows(100, 20)
    assert w.contains(1_000, 900) and w.contains(1_000, 1_000)
    assert not w.contains(1_000, 899) and not w.contains(1_000, 1_001)
    assert w.closes_at(1_000) == 1_021
    assert not w.is_late(1_000, 1_020) and w.is_late(999, 1_020)
    assert w.held_until(1_000) == 1_121  # the last window to hold it ends at 1100
    with pytest.raises(ValueError):
        Windows.sliding(-1)


def test_each_record_time_ends_a_window_of_the_records_before_it() -> None:
    feed = Feed(offsets(Windows.sliding(100), {}))
    feed.send("k", 1_000)
    feed.send("k", 1_050)
    feed.send("k", 1_100)  # [1000, 1100]: all three
    feed.send("k", 1_101)  # [1001, 1101]: not the first
    # No grace: each window closed as the clock passed its end.
    assert feed.proc.windows_of("k") == {1_001: [1, 2, 3]}
    feed.send("z", 5_000)
    assert feed.results() == {
        ("k", 900, 1_001): [0],
        ("k", 950, 1_051): [0, 1],
        ("k", 1_000, 1_101): [0, 1, 2],
        ("k", 1_001, 1_102): [1, 2, 3],
    }


def test_an_out_of_order_record_within_grace_goes_in_every_open_window_holding_it() -> None:
    feed = Feed(offsets(Windows.sliding(100, grace_ms=50), {}))
    feed.send("k", 1_000)
    feed.send("k", 1_040)
    assert feed.send("k", 1_020) is Outcome.ACCEPTED  # behind the clock by 20
    # 1040's window holds it (folded in offset order); its own holds 1000 and itself.
    assert feed.proc.windows_of("k") == {900: [0], 920: [0, 2], 940: [0, 1, 2]}
    assert feed.send("k", 989) is Outcome.LATE  # 51 behind the clock
    assert feed.proc.late_count(P) == 1


def test_a_record_more_than_grace_behind_the_clock_is_late() -> None:
    feed = Feed(offsets(Windows.sliding(100, grace_ms=10), {}))
    feed.send("k", 1_000)
    feed.send("k", 1_050)
    # 1040 would fall in 1050's window, still open, but the window it ends is closed: late,
    # and it changes nothing.
    assert feed.send("k", 1_039) is Outcome.LATE
    assert feed.proc.windows_of("k") == {950: [0, 1]}  # 1000's closed at 1011
    assert feed.results() == {("k", 900, 1_001): [0]}
    assert feed.proc.late_count(P) == 1
    assert feed.proc.process(P, "k", 2, 1_039, 2).outcome is Outcome.SKIPPED


def test_a_record_kept_after_a_crash_that_lost_the_bookkeeping_is_a_replay() -> None:
    store: dict[str, Any] = {}
    proc = offsets(Windows.sliding(100), store)
    proc.process(P, "k", 0, 100, 0)
    store["~p/0"] = [100, -1, 0]
    assert proc.process(P, "k", 0, 100, 0).outcome is Outcome.REPLAY
    assert proc.windows_of("k") == {0: [0]}


def test_a_record_with_the_id_of_one_kept_is_a_duplicate() -> None:
    feed = Feed(offsets(Windows.sliding(100), {}))
    feed.send("k", 1_000, "x")
    assert feed.send("k", 1_010, "x") is Outcome.DUPLICATE
    assert feed.send("k", 1_010, "y") is Outcome.ACCEPTED
    assert feed.proc.windows_of("k") == {910: [0, 2]}


def test_kept_values_are_restored_for_windows_still_to_come() -> None:
    proc: SlidingProcessor[int] = SlidingProcessor(
        Windows.sliding(100),
        {},
        initial=int,
        fold=lambda total, v: total + v,
        restore=lambda held: int(held, 16),
    )
    proc.process(P, "k", 0, 1_000, 10, held="a")
    proc.process(P, "k", 1, 1_050, 1, held="1")
    assert proc.windows_of("k") == {900: 10, 950: 11}


def test_closed_windows_and_records_out_of_reach_are_gone_from_the_store() -> None:
    store: dict[str, Any] = {}
    feed = Feed(offsets(Windows.sliding(100), store))
    for i in range(10):
        feed.send(f"k{i % 3}", 1_000 + i * 10)
    feed.send("z", 10_000)
    assert sorted(k for k in store if k.startswith("k/")) == ["k/z"]
    assert len(feed.closed) == 10


def test_windows_held_after_a_restart_still_close() -> None:
    store: dict[str, Any] = {}
    before = Feed(offsets(Windows.sliding(100, grace_ms=1_000), store))
    for i in range(5):
        before.send(f"k{i}", 1_000 + i)
    assert before.closed == []
    after = Feed(offsets(Windows.sliding(100, grace_ms=1_000), dict(store)), offset=before.offset)
    after.send("z", 5_000)
    assert {c.key for c in after.closed} == {f"k{i}" for i in range(5)}


# -- the whole: equal to a batch computation --


def batch_windows(
    windows: SlidingWindows, records: list[tuple[str, int]]
) -> tuple[dict[tuple[str, int, int], list[int]], set[int], int]:
    """The windows of the records that are not late, each the offsets of the records in it;
    the late offsets; the final clock. Straight from the rule: for each time ``t`` of a key's
    record, the key's records in ``[t - size, t]``."""
    clock = -(2**62)
    late: set[int] = set()
    kept: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for offset, (key, t) in enumerate(records):
        if windows.is_late(t, clock):
            late.add(offset)
            continue
        clock = max(clock, t)
        kept[key].append((t, offset))
    out: dict[tuple[str, int, int], list[int]] = {}
    for key, held in kept.items():
        for end in {t for t, _ in held}:
            inside = sorted(o for t, o in held if windows.contains(end, t))
            out[(key, end - windows.size_ms, end + 1)] = inside
    return out, late, clock


def walk(steps: list[tuple[str, int]]) -> list[tuple[str, int]]:
    t = 1_000
    out = []
    for key, step in steps:
        t += step
        out.append((key, t))
    return out


@settings(max_examples=400, deadline=None)
@given(
    size=st.integers(0, 20),
    grace=st.integers(0, 20),
    bucket=st.integers(1, 30),
    steps=st.lists(st.tuples(st.sampled_from("ab"), st.integers(-12, 12)), min_size=1, max_size=60),
    batch_sizes=st.lists(st.integers(1, 8), min_size=1, max_size=20),
    restart_at=st.integers(0, 20),
)
def test_equals_a_batch_computation_over_batches_and_a_restart(
    size: int,
    grace: int,
    bucket: int,
    steps: list[tuple[str, int]],
    batch_sizes: list[int],
    restart_at: int,
) -> None:
    records = walk(steps)
    windows = Windows.sliding(size, grace_ms=grace)
    store: dict[str, Any] = {}
    proc = offsets(windows, WriteBack(store), bucket)
    closed: list[ClosedWindow[list[int]]] = []
    offset = 0
    batch_no = 0
    while offset < len(records):
        if batch_no == restart_at:
            store = dict(store)  # what the table gives back; nothing from memory
            proc = offsets(windows, WriteBack(store), bucket)
        for key, t in records[offset : offset + batch_sizes[batch_no % len(batch_sizes)]]:
            if proc.process(P, key, offset, t, offset).outcome is Outcome.LATE:
                proc.count_late(P, offset)
            offset += 1
        expiry = proc.plan_expiry(P)
        closed.extend(expiry.emitted)
        expiry.apply()
        assert isinstance(proc.store, WriteBack)
        proc.store.write_through(last=is_book_key)
        batch_no += 1
    want, late, clock = batch_windows(windows, records)
    got = {(c.key, c.start_ms, c.end_ms): c.value for c in closed}
    assert len(got) == len(closed)  # each window emitted once
    held = {
        (key, start, start + size + 1): value
        for key in "ab"
        for start, value in proc.windows_of(key).items()
    }
    assert not set(got) & set(held)
    assert {**got, **held} == want
    index = ExpiryIndex(bucket)
    assert set(got) == {w for w in want if index.swept(windows.closes_at(w[2] - 1) - 1, clock)}
    assert proc.late_count(P) == len(late)
