"""The windowed stream-stream join without a broker: order, lateness, left-join emission, expiry.

The processor runs over two dicts standing in for the two changelog-backed tables.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamapp.joins.core import Entry, ExpiryIndex, JoinProcessor, Outcome, Pair
from streamapp.joins.window import JoinKind, JoinWindow, Side

WINDOW = JoinWindow(before_ms=0, after_ms=10_000, grace_ms=2_000)  # the ad-click rule
P = 0


def processor(kind: JoinKind = JoinKind.INNER, window: JoinWindow = WINDOW) -> JoinProcessor:
    return JoinProcessor(window, kind, {}, {}, index=ExpiryIndex(width_ms=1))


class Feed:
    """Records fed to one processor, offsets counted per side; expiry applied after each."""

    def __init__(self, proc: JoinProcessor) -> None:
        self.proc = proc
        self.offsets = {Side.LEFT: 0, Side.RIGHT: 0}
        self.out: list[Pair] = []
        self.late: list[tuple[Side, int]] = []

    def send(self, side: Side, key: str, time_ms: int, value: Any = None) -> Outcome:
        offset = self.offsets[side]
        self.offsets[side] += 1
        arrival = self.proc.process(side, P, key, Entry(offset, time_ms, value))
        if arrival.outcome is Outcome.LATE:
            self.proc.count_late(side, P, offset)
            self.late.append((side, offset))
        self.out.extend(arrival.pairs)
        expiry = self.proc.plan_expiry(P)
        self.out.extend(expiry.unmatched)
        expiry.apply()
        return arrival.outcome

    def left(self, key: str, time_ms: int, value: Any = None) -> Outcome:
        return self.send(Side.LEFT, key, time_ms, value)

    def right(self, key: str, time_ms: int, value: Any = None) -> Outcome:
        return self.send(Side.RIGHT, key, time_ms, value)

    def values(self) -> list[tuple[Any, Any]]:
        return [
            (p.left.value if p.left else None, p.right.value if p.right else None) for p in self.out
        ]


def test_window_rule_bounds_are_inclusive() -> None:
    w = JoinWindow(before_ms=5, after_ms=10)
    assert w.matches(100, 95) and w.matches(100, 110)
    assert not w.matches(100, 94) and not w.matches(100, 111)
    assert JoinWindow.within(3).matches(10, 7) and JoinWindow.within(3).matches(10, 13)
    with pytest.raises(ValueError):
        JoinWindow(before_ms=-1, after_ms=0)


def test_left_first_then_right_joins() -> None:
    feed = Feed(processor())
    assert feed.left("a", 1_000, "imp") is Outcome.ACCEPTED
    assert feed.right("a", 3_000, "click") is Outcome.ACCEPTED
    assert feed.values() == [("imp", "click")]


def test_right_first_then_left_joins() -> None:
    feed = Feed(processor())
    feed.right("a", 3_000, "click")
    assert feed.out == []
    feed.left("a", 1_000, "imp")
    assert feed.values() == [("imp", "click")]


def test_only_same_key_and_within_window_join() -> None:
    feed = Feed(processor())
    feed.left("a", 1_000, "a-imp")
    feed.right("b", 2_000, "b-click")  # other key
    feed.right("a", 999, "early")  # before the left record: before_ms is 0
    feed.right("a", 11_000, "edge")  # exactly after_ms later
    feed.right("a", 11_001, "too-late-for-window")
    assert feed.values() == [("a-imp", "edge")]


def test_many_to_many() -> None:
    feed = Feed(processor(window=JoinWindow.within(1_000, grace_ms=500)))
    feed.left("k", 1_000, "l1")
    feed.left("k", 1_500, "l2")
    feed.right("k", 1_200, "r1")
    feed.right("k", 2_400, "r2")  # only l2 (|1500-2400| <= 1000)
    assert sorted(feed.values()) == [("l1", "r1"), ("l2", "r1"), ("l2", "r2")]


def test_late_record_is_not_joined_and_is_counted() -> None:
    proc = processor()
    feed = Feed(proc)
    feed.left("a", 10_000, "l")
    feed.right("a", 15_000, "r1")
    # 2 s of disorder on the right is allowed, more is late.
    assert feed.right("a", 13_000, "r-within-grace") is Outcome.ACCEPTED
    assert feed.right("a", 12_999, "r-late") is Outcome.LATE
    assert feed.values() == [("l", "r1"), ("l", "r-within-grace")]
    assert proc.late_count(Side.RIGHT, P) == 1
    assert proc.late_count(Side.LEFT, P) == 0


def test_left_join_emits_unmatched_once_window_and_grace_passed() -> None:
    feed = Feed(processor(JoinKind.LEFT))
    feed.left("a", 1_000, "lonely")
    feed.left("b", 1_000, "matched")
    feed.right("b", 2_000, "r")
    # Expires once the right clock passes 1_000 + 10_000 + 2_000.
    feed.right("z", 13_000)
    assert feed.values() == [("matched", "r")]
    feed.right("z", 13_001)
    assert feed.values() == [("matched", "r"), ("lonely", None)]
    # Once only, and the left state is gone.
    feed.right("z", 30_000)
    assert feed.values() == [("matched", "r"), ("lonely", None)]
    assert feed.proc.stored(Side.LEFT, "a") == [] and feed.proc.stored(Side.LEFT, "b") == []


def test_left_clock_does_not_expire_left_records() -> None:
    # After a restart the left topic's backlog may be read far ahead of the right's: left
    # records are expired by the right clock only, so their matches still come.
    feed = Feed(processor(JoinKind.LEFT))
    feed.left("a", 1_000, "first")
    for t in range(2_000, 100_000, 5_000):
        feed.left("x", t)
    feed.right("a", 5_000, "r")
    assert ("first", "r") in feed.values()
    assert ("first", None) not in feed.values()


def test_right_records_expire_by_left_clock() -> None:
    proc = processor()
    feed = Feed(proc)
    feed.right("a", 5_000, "r")
    feed.left("x", 7_000)  # 5_000 + before 0 + grace 2_000 = 7_000: not yet
    assert [e.value for e in proc.stored(Side.RIGHT, "a")] == ["r"]
    feed.left("x", 7_001)
    assert proc.stored(Side.RIGHT, "a") == []


def test_inner_join_emits_no_unmatched_and_outer_emits_both() -> None:
    for kind, expected in [
        (JoinKind.INNER, []),
        (JoinKind.OUTER, [("l", None), (None, "r")]),
    ]:
        feed = Feed(processor(kind))
        feed.left("a", 1_000, "l")
        feed.right("b", 1_000, "r")
        feed.left("x", 100_000)
        feed.right("y", 100_000)
        assert sorted(feed.values(), key=repr) == sorted(expected, key=repr), kind


def test_expiry_empties_the_stores() -> None:
    proc = processor(JoinKind.LEFT)
    feed = Feed(proc)
    for i in range(50):
        feed.left(f"k{i}", i * 100)
        feed.right(f"k{i}", i * 100 + 50)
    feed.left("end", 1_000_000)
    feed.right("end", 1_000_000)
    for store in proc.stores.values():
        user_keys = [k for k in store if k.startswith("k/") and k != "k/end"]
        buckets = [k for k in store if k.startswith("~b/")]
        assert user_keys == []
        assert len(buckets) <= 1  # the end records' own
    assert len(feed.out) == 51


def test_replay_of_a_stored_record_emits_its_pairs_again_and_stores_nothing() -> None:
    proc = processor()
    proc.process(Side.LEFT, P, "a", Entry(0, 1_000, "l"))
    proc.process(Side.RIGHT, P, "a", Entry(0, 2_000, "r"))
    again = proc.process(Side.RIGHT, P, "a", Entry(0, 2_000, "r"))
    assert again.outcome is Outcome.REPLAY
    assert [(p.left and p.left.value, p.right and p.right.value) for p in again.pairs] == [
        ("l", "r")
    ]
    assert len(proc.stored(Side.RIGHT, "a")) == 1


def test_a_record_stored_but_not_marked_seen_before_a_crash_is_a_replay_not_its_own_duplicate() -> (
    None
):
    # ``~seen`` is written after the entries; a crash between them leaves the record stored
    # and its offset unseen. Processed again, it must emit its pair again: the first emission
    # may have died with the crash. With record ids, it used to meet its own entry and be
    # reported a duplicate of itself, its pair lost.
    left: dict[str, Any] = {}
    right: dict[str, Any] = {}
    proc = JoinProcessor(WINDOW, JoinKind.LEFT, left, right, index=ExpiryIndex(width_ms=1))
    proc.process(Side.LEFT, P, "a", Entry(0, 1_000, "impression", id="a"))
    first = proc.process(Side.RIGHT, P, "a", Entry(0, 2_000, "click", id="c1"))
    assert [(p.left and p.left.value, p.right and p.right.value) for p in first.pairs] == [
        ("impression", "click")
    ]
    del right[f"~seen/{P}"]  # the crash came before the click's offset was written
    again = proc.process(Side.RIGHT, P, "a", Entry(0, 2_000, "click", id="c1"))
    assert again.outcome is Outcome.REPLAY
    assert [(p.left and p.left.value, p.right and p.right.value) for p in again.pairs] == [
        ("impression", "click")
    ]
    assert len(proc.stored(Side.RIGHT, "a")) == 1
    # Now seen: the next record is judged against it, and a true duplicate is still one.
    assert right[f"~seen/{P}"] == 0
    dup = proc.process(Side.RIGHT, P, "a", Entry(1, 2_100, "click", id="c1"))
    assert dup.outcome is Outcome.DUPLICATE and dup.pairs == ()


def test_replay_of_an_expired_record_is_skipped() -> None:
    feed = Feed(processor(JoinKind.LEFT))
    feed.left("a", 1_000, "l")
    feed.right("z", 50_000)
    assert feed.values() == [("l", None)]
    assert feed.proc.process(Side.LEFT, P, "a", Entry(0, 1_000, "l")).outcome is Outcome.SKIPPED


def test_late_record_is_counted_only_when_count_late_runs() -> None:
    proc = processor()
    proc.process(Side.LEFT, P, "a", Entry(0, 10_000))
    late = proc.process(Side.LEFT, P, "a", Entry(1, 1_000))
    assert late.outcome is Outcome.LATE
    # Not counted (nor marked seen) until its dead letter is delivered: a crash in between
    # processes it again.
    assert proc.late_count(Side.LEFT, P) == 0
    assert proc.process(Side.LEFT, P, "a", Entry(1, 1_000)).outcome is Outcome.LATE
    proc.count_late(Side.LEFT, P, 1)
    assert proc.late_count(Side.LEFT, P) == 1
    assert proc.process(Side.LEFT, P, "a", Entry(1, 1_000)).outcome is Outcome.SKIPPED


def test_partitions_are_independent() -> None:
    proc = processor()
    proc.process(Side.LEFT, 0, "a", Entry(0, 100_000))
    # Partition 1's left clock is its own: this record is not late there.
    assert proc.process(Side.LEFT, 1, "b", Entry(0, 1_000)).outcome is Outcome.ACCEPTED
    assert proc.clock(Side.LEFT, 0) == 100_000 and proc.clock(Side.LEFT, 1) == 1_000


# -- the join equals a batch nested-loop join, whatever the interleaving --

KEYS = ["a", "b", "c"]


@st.composite
def side_records(draw: st.DrawFn, grace_ms: int, late: bool) -> list[tuple[str, int]]:
    """Records of one side whose event times run back at most ``grace_ms``, or more if ``late``."""
    n = draw(st.integers(0, 25))
    out: list[tuple[str, int]] = []
    clock = 0
    back = grace_ms + 3_000 if late else grace_ms
    for _ in range(n):
        t = max(0, clock + draw(st.integers(-back, 3_000)))
        clock = max(clock, t)
        out.append((draw(st.sampled_from(KEYS)), t))
    return out


@st.composite
def join_inputs(draw: st.DrawFn) -> tuple[JoinWindow, JoinKind, list[Any], list[Any], list[bool]]:
    window = JoinWindow(
        before_ms=draw(st.integers(0, 3_000)),
        after_ms=draw(st.integers(0, 3_000)),
        grace_ms=draw(st.integers(0, 2_000)),
    )
    kind = draw(st.sampled_from(list(JoinKind)))
    late = draw(st.booleans())
    lefts = draw(side_records(window.grace_ms, late))
    rights = draw(side_records(window.grace_ms, late))
    order = draw(st.permutations([True] * len(lefts) + [False] * len(rights)))
    return window, kind, lefts, rights, list(order)


def on_time(
    window: JoinWindow, records: list[tuple[str, int]]
) -> list[tuple[int, tuple[str, int]]]:
    clock = -1
    kept = []
    for i, (key, t) in enumerate(records):
        if not window.is_late(t, clock):
            kept.append((i, (key, t)))
            clock = max(clock, t)
    return kept


@settings(max_examples=300, deadline=None)
@given(join_inputs(), st.integers(1, 5_000))
def test_join_equals_batch_nested_loop_join_of_records_not_late(
    inputs: tuple[JoinWindow, JoinKind, list[Any], list[Any], list[bool]], bucket_ms: int
) -> None:
    window, kind, lefts, rights, order = inputs
    index = ExpiryIndex(width_ms=bucket_ms)
    proc = JoinProcessor(window, kind, {}, {}, index=index)
    out: list[tuple[int | None, int | None]] = []
    li = ri = 0
    for is_left in order:
        if is_left:
            key, t = lefts[li]
            arrival = proc.process(Side.LEFT, P, key, Entry(li, t))
            li += 1
        else:
            key, t = rights[ri]
            arrival = proc.process(Side.RIGHT, P, key, Entry(ri, t))
            ri += 1
        assert arrival.outcome in (Outcome.ACCEPTED, Outcome.LATE)
        out.extend(
            (p.left.offset if p.left else None, p.right.offset if p.right else None)
            for p in arrival.pairs
        )
        expiry = proc.plan_expiry(P)
        out.extend(
            (p.left.offset if p.left else None, p.right.offset if p.right else None)
            for p in expiry.unmatched
        )
        expiry.apply()

    # Late records (more than grace behind their side's earlier records) take no part.
    lefts_in = on_time(window, lefts)
    rights_in = on_time(window, rights)
    expected: list[tuple[int | None, int | None]] = [
        (i, j)
        for i, (lk, lt) in lefts_in
        for j, (rk, rt) in rights_in
        if lk == rk and window.matches(lt, rt)
    ]
    left_clock = max((t for _, t in lefts), default=-1)
    right_clock = max((t for _, t in rights), default=-1)
    matched_left = {i for i, _ in expected}
    matched_right = {j for _, j in expected}
    # Unmatched records are emitted once the other side's clock has expired them (at the end
    # of their expiry bucket).
    if kind.emits_unmatched(Side.LEFT):
        expected += [
            (i, None)
            for i, (_, lt) in lefts_in
            if i not in matched_left
            and index.swept(window.expires_after(Side.LEFT, lt), right_clock)
        ]
    if kind.emits_unmatched(Side.RIGHT):
        expected += [
            (None, j)
            for j, (_, rt) in rights_in
            if j not in matched_right
            and index.swept(window.expires_after(Side.RIGHT, rt), left_clock)
        ]
    assert sorted(out, key=repr) == sorted(expected, key=repr)
