"""The windowed join's replays under at-least-once, without a broker: what a record processed
again after a crash emits.

A crash can come after a record's pairs were sent and before they were delivered, while the
stores keep what it and the records after it did: their entries and their clocks, which may
since have moved past the expiry of the record's partners (or of the record itself). The
sweep those clocks call for had not run: it runs only once what was sent is delivered. The
processor runs over dicts standing in for the two changelog-backed tables; a crash is the
output thrown away with no sweep applied, and the restart a new processor over the same stores.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streamapp.joins.core import Entry, ExpiryIndex, JoinProcessor, Outcome, Pair
from streamapp.joins.window import JoinKind, JoinWindow, Side
from streamapp.joins.write_back import WriteBack

WINDOW = JoinWindow(before_ms=0, after_ms=10_000, grace_ms=2_000)
P = 0


def _ids(pairs: tuple[Pair, ...] | list[Pair]) -> list[tuple[int | None, int | None]]:
    return sorted(
        ((p.left.offset if p.left else None, p.right.offset if p.right else None) for p in pairs),
        key=repr,
    )


def test_a_replay_emits_again_a_pair_whose_partner_the_clock_has_since_expired() -> None:
    left: dict[str, Any] = {}
    right: dict[str, Any] = {}
    proc = JoinProcessor(WINDOW, JoinKind.LEFT, left, right, index=ExpiryIndex(1))
    proc.process(Side.LEFT, P, "a", Entry(0, 1_000, "impression"))
    first = proc.process(Side.RIGHT, P, "a", Entry(0, 3_000, "click"))
    assert _ids(first.pairs) == [(0, 0)]
    # A later click moves the right clock past the impression's expiry (1_000 + 10_000 + 2_000);
    # the crash comes before the sweep (and the pair's delivery).
    proc.process(Side.RIGHT, P, "z", Entry(1, 20_000, "other click"))
    restarted = JoinProcessor(WINDOW, JoinKind.LEFT, left, right, index=ExpiryIndex(1))
    again = restarted.process(Side.RIGHT, P, "a", Entry(0, 3_000, "click"))
    assert again.outcome is Outcome.REPLAY
    assert _ids(again.pairs) == [(0, 0)]


def test_a_replay_whose_own_entry_the_clock_has_since_expired_emits_its_pairs_again() -> None:
    left: dict[str, Any] = {}
    right: dict[str, Any] = {}
    proc = JoinProcessor(WINDOW, JoinKind.LEFT, left, right, index=ExpiryIndex(1))
    proc.process(Side.LEFT, P, "a", Entry(0, 1_000, "impression"))
    first = proc.process(Side.RIGHT, P, "a", Entry(0, 3_000, "click"))
    assert _ids(first.pairs) == [(0, 0)]
    # A later impression moves the left clock past the click's expiry (3_000 + 0 + 2_000).
    proc.process(Side.LEFT, P, "z", Entry(1, 9_000, "other impression"))
    restarted = JoinProcessor(WINDOW, JoinKind.LEFT, left, right, index=ExpiryIndex(1))
    again = restarted.process(Side.RIGHT, P, "a", Entry(0, 3_000, "click"))
    assert again.outcome is Outcome.REPLAY
    assert _ids(again.pairs) == [(0, 0)]
    assert len(restarted.stored(Side.RIGHT, "a")) == 1  # stored once, not again


def test_a_record_still_to_be_replayed_is_kept_while_the_other_side_expires_it() -> None:
    # The ad-click join: clicks on the left, impressions on the right.
    window = JoinWindow(before_ms=12_000, after_ms=2_000, grace_ms=2_000)
    left: dict[str, Any] = {}
    right: dict[str, Any] = {}
    proc = JoinProcessor(window, JoinKind.LEFT, left, right, index=ExpiryIndex(1_000))
    proc.process(Side.RIGHT, P, "auction", Entry(0, 1_000, "impression"))
    first = proc.process(Side.LEFT, P, "auction", Entry(0, 3_000, "click"))
    assert _ids(first.pairs) == [(0, 0)]
    assert proc.plan_expiry(P).empty  # no flush: the pair dies with the crash
    # After the restart the impressions' backlog comes first; their clock passes the click's
    # expiry (3_000 + 2_000 + 2_000), and their sweep would drop it before its replay.
    restarted = JoinProcessor(window, JoinKind.LEFT, left, right, index=ExpiryIndex(1_000))
    restarted.process(Side.RIGHT, P, "other", Entry(1, 9_000, "impression 2"))
    expiry = restarted.plan_expiry(P)
    expiry.apply()
    assert expiry.unmatched == ()
    again = restarted.process(Side.LEFT, P, "auction", Entry(0, 3_000, "click"))
    assert again.outcome is Outcome.REPLAY and _ids(again.pairs) == [(0, 0)]
    # Replayed, the click goes at the next sweep, the clocks where they were; matched, it
    # emits nothing.
    expiry = restarted.plan_expiry(P)
    expiry.apply()
    assert expiry.unmatched == () and restarted.stored(Side.LEFT, "auction") == []
    assert restarted.owed_after(Side.LEFT, P) is None
    assert left["~out/0"] == 0 and right["~out/0"] == 1


def test_only_records_handled_after_the_last_sweep_applied_are_kept_for_a_replay() -> None:
    window = JoinWindow(before_ms=0, after_ms=100, grace_ms=0)
    left: dict[str, Any] = {}
    right: dict[str, Any] = {}
    proc = JoinProcessor(window, JoinKind.LEFT, left, right, index=ExpiryIndex(1))
    proc.process(Side.LEFT, P, "a", Entry(0, 0, "l0"))
    proc.process(Side.RIGHT, P, "z", Entry(0, 200, "r0"))
    expiry = proc.plan_expiry(P)
    assert _ids(expiry.unmatched) == [(0, None)]
    expiry.apply()  # delivered: up to here nothing is owed
    assert proc.owed_after(Side.LEFT, P) is None and proc.owed_after(Side.RIGHT, P) is None
    proc.process(Side.LEFT, P, "b", Entry(1, 150, "l1"))
    # Crash. The restarted worker reads the left topic from offset 1 again, after the right
    # clock moved on: l1 (unmatched) is kept, not emitted, until its replay.
    restarted = JoinProcessor(window, JoinKind.LEFT, left, right, index=ExpiryIndex(1))
    assert restarted.owed_after(Side.LEFT, P) == 0
    restarted.process(Side.RIGHT, P, "z", Entry(1, 400, "r1"))
    expiry = restarted.plan_expiry(P)
    expiry.apply()
    assert expiry.unmatched == () and len(restarted.stored(Side.LEFT, "b")) == 1
    assert restarted.process(Side.LEFT, P, "b", Entry(1, 150, "l1")).outcome is Outcome.REPLAY
    expiry = restarted.plan_expiry(P)
    expiry.apply()
    assert _ids(expiry.unmatched) == [(1, None)]  # once its replay is done
    assert restarted.plan_expiry(P).empty


def test_a_replay_emits_the_pairs_of_its_own_processing_not_those_of_later_records() -> None:
    proc = JoinProcessor(WINDOW, JoinKind.INNER, {}, {}, index=ExpiryIndex(1))
    proc.process(Side.LEFT, P, "a", Entry(0, 1_000, "i1"))
    proc.process(Side.RIGHT, P, "a", Entry(0, 3_000, "c1"))
    later = proc.process(Side.LEFT, P, "a", Entry(1, 2_000, "i2"))  # meets c1 on arrival
    assert _ids(later.pairs) == [(1, 0)]
    again = proc.process(Side.RIGHT, P, "a", Entry(0, 3_000, "c1"))
    # (i2, c1) is i2's to emit again, if i2 is processed again.
    assert again.outcome is Outcome.REPLAY and _ids(again.pairs) == [(0, 0)]
    assert _ids(proc.process(Side.LEFT, P, "a", Entry(1, 2_000, "i2")).pairs) == [(1, 0)]


def test_entries_written_before_partners_were_kept_replay_as_they_did() -> None:
    # A stored entry of the older format says only whether it matched: its replay pairs it
    # with what is held and not expired at the current clocks.
    left: dict[str, Any] = {"k/a": [[0, 1_000, "i1", 1]], "~clock/0": 1_000, "~seen/0": 0}
    right: dict[str, Any] = {"k/a": [[0, 3_000, "c1", 1]], "~clock/0": 3_000, "~seen/0": 0}
    for store, bucket in ((left, 13_000), (right, 5_000)):
        store["~live/0"] = [bucket]
        store[f"~b/0/{bucket}"] = ["a"]
    proc = JoinProcessor(WINDOW, JoinKind.LEFT, left, right, index=ExpiryIndex(1))
    again = proc.process(Side.RIGHT, P, "a", Entry(0, 3_000, "c1"))
    assert again.outcome is Outcome.REPLAY and _ids(again.pairs) == [(0, 0)]


def test_entries_keep_their_partners_through_json() -> None:
    entry = Entry(3, 4, "v", True, None, (7, 9))
    assert Entry.from_json(entry.to_json()) == entry
    with_id = Entry(3, 4, "v", True, "id-1", ())
    assert Entry.from_json(with_id.to_json()) == with_id
    assert Entry.from_json([3, 4, "v", 1]).partners is None  # the older format


# -- whatever the records, the crash point and the interleaving after the restart --

KEYS = ["a", "b"]


@st.composite
def crashed_runs(draw: st.DrawFn) -> dict[str, Any]:
    window = JoinWindow(
        before_ms=draw(st.integers(0, 3_000)),
        after_ms=draw(st.integers(0, 3_000)),
        grace_ms=draw(st.integers(0, 2_000)),
    )
    sides = {}
    for side in Side:
        times: list[tuple[str, int]] = []
        clock = 0
        for _ in range(draw(st.integers(0, 20))):
            clock = max(0, clock + draw(st.integers(-window.grace_ms - 1_000, 4_000)))
            times.append((draw(st.sampled_from(KEYS)), clock))
        sides[side] = times
    order = draw(
        st.permutations([Side.LEFT] * len(sides[Side.LEFT]) + [Side.RIGHT] * len(sides[Side.RIGHT]))
    )
    crash_at = draw(st.integers(0, len(order)))
    # After the restart each side is read again from its committed offset, at or before what
    # the crash lost, and the two sides interleave anew.
    from_offset = {
        side: draw(st.integers(0, sum(1 for s in order[:crash_at] if s is side))) for side in Side
    }
    replayed = [side for side in Side for _ in range(len(sides[side]) - from_offset[side])]
    return {
        "window": window,
        "kind": draw(st.sampled_from(list(JoinKind))),
        "width": draw(st.sampled_from([1, 700])),
        "sides": sides,
        "order": list(order),
        "crash_at": crash_at,
        "from_offset": from_offset,
        "replay_order": list(draw(st.permutations(replayed))),
    }


@settings(max_examples=400, deadline=None)
@given(crashed_runs(), st.booleans())
def test_a_replay_emits_every_pair_the_crash_lost_and_only_pairs_of_the_join(
    run: dict[str, Any], sweep_per_record: bool
) -> None:
    """Before the crash each record's sweep was applied (its output delivered) up to the crash
    point, and none after. After the restart the sweeps run as the wiring runs them: after each
    record, or once at the end (a batch)."""
    window: JoinWindow = run["window"]
    kind: JoinKind = run["kind"]
    sides: dict[Side, list[tuple[str, int]]] = run["sides"]
    left: dict[str, Any] = {}
    right: dict[str, Any] = {}
    proc = JoinProcessor(window, kind, left, right, index=ExpiryIndex(run["width"]))
    first: dict[tuple[Side, int], set[tuple[Any, Any]]] = {}
    unmatched: set[tuple[Any, Any]] = set()  # delivered before the crash, or emitted after
    offsets = {Side.LEFT: 0, Side.RIGHT: 0}
    for i, side in enumerate(run["order"]):
        offset = offsets[side]
        offsets[side] += 1
        key, time_ms = sides[side][offset]
        arrival = proc.process(side, P, key, Entry(offset, time_ms))
        first[(side, offset)] = set(_ids(arrival.pairs))
        if i < run["crash_at"]:  # delivered: what the clocks expired is swept
            if arrival.outcome is Outcome.LATE:
                proc.count_late(side, P, offset)
            unmatched |= _sweep(proc)
    lost = {(side, offset) for side, offset in first if offset >= _sent(run, side)}

    # Every pair of the join: records that are not late, matched under the window rule.
    on_time = {side: _on_time(window, sides[side]) for side in Side}
    valid = {
        (i, j)
        for i, (lk, lt) in on_time[Side.LEFT].items()
        for j, (rk, rt) in on_time[Side.RIGHT].items()
        if lk == rk and window.matches(lt, rt)
    }

    restarted = JoinProcessor(window, kind, left, right, index=ExpiryIndex(run["width"]))
    offsets = dict(run["from_offset"])
    for side in run["replay_order"]:
        offset = offsets[side]
        offsets[side] += 1
        key, time_ms = sides[side][offset]
        arrival = restarted.process(side, P, key, Entry(offset, time_ms))
        emitted = set(_ids(arrival.pairs))
        assert emitted <= valid
        if (side, offset) in lost:
            assert emitted >= first[(side, offset)], (side, offset)
        if arrival.outcome is Outcome.LATE:
            restarted.count_late(side, P, offset)
        if sweep_per_record:
            unmatched |= _sweep(restarted)

    # Records far ahead on both sides expire everything else: nothing is kept for good, and
    # the unmatched records are those of the join, each emitted.
    end = 10 * _last_time(sides) + 100_000
    for n, time_ms in enumerate((end, end + 10_000)):
        for side in Side:
            restarted.process(side, P, "end", Entry(len(sides[side]) + n, time_ms))
            unmatched |= _sweep(restarted)
    for store in (left, right):
        assert [k for k in store if k.startswith("k/")] == ["k/end"]
    matched = {side: {pair[0 if side is Side.LEFT else 1] for pair in valid} for side in Side}
    expected = {
        (i, None) if side is Side.LEFT else (None, i)
        for side in Side
        if kind.emits_unmatched(side)
        for i in on_time[side]
        if i not in matched[side]
    }
    assert unmatched == expected


def _sweep(proc: JoinProcessor) -> set[tuple[Any, Any]]:
    expiry = proc.plan_expiry(P)
    expiry.apply()
    return set(_ids(expiry.unmatched))


def _last_time(sides: dict[Side, list[tuple[str, int]]]) -> int:
    return max((t for records in sides.values() for _, t in records), default=0)


def _sent(run: dict[str, Any], side: Side) -> int:
    """The first offset of ``side`` processed after the crash point (its pairs were lost)."""
    return sum(1 for s in run["order"][: run["crash_at"]] if s is side)


def _on_time(window: JoinWindow, records: list[tuple[str, int]]) -> dict[int, tuple[str, int]]:
    clock = -1
    kept = {}
    for offset, (key, time_ms) in enumerate(records):
        if not window.is_late(time_ms, clock):
            kept[offset] = (key, time_ms)
            clock = max(clock, time_ms)
    return kept


# -- over batches, as the wiring runs it --


def _batches(order: list[Side], size: int) -> list[list[Side]]:
    """``order`` cut into batches of one side (one source partition) of at most ``size``."""
    out: list[list[Side]] = []
    for side in order:
        if out and out[-1][0] is side and len(out[-1]) < size:
            out[-1].append(side)
        else:
            out.append([side])
    return out


@settings(max_examples=300, deadline=None)
@given(crashed_runs(), st.integers(1, 8))
def test_over_batches_a_crash_after_a_batch_was_stored_loses_no_pair(
    run: dict[str, Any], size: int
) -> None:
    """Each batch is stored as it ends; its pairs go out with it, delivered only at the next
    flush (a sweep that found something). The crash comes after the batches up to the crash
    point were stored, and loses what they sent since the last flush."""
    window: JoinWindow = run["window"]
    kind: JoinKind = run["kind"]
    sides: dict[Side, list[tuple[str, int]]] = run["sides"]
    left: dict[str, Any] = {}
    right: dict[str, Any] = {}

    def over(stores: tuple[dict[str, Any], dict[str, Any]]) -> JoinProcessor:
        return JoinProcessor(
            window,
            kind,
            WriteBack(stores[0]),
            WriteBack(stores[1]),
            index=ExpiryIndex(run["width"]),
        )

    proc = over((left, right))
    offsets = {Side.LEFT: 0, Side.RIGHT: 0}
    pending: dict[tuple[Side, int], set[tuple[Any, Any]]] = {}  # sent, not delivered yet
    unmatched: set[tuple[Any, Any]] = set()
    handled = 0
    for batch in _batches(run["order"][: run["crash_at"]], size):
        for side in batch:
            offset = offsets[side]
            offsets[side] += 1
            key, time_ms = sides[side][offset]
            arrival = proc.process(side, P, key, Entry(offset, time_ms))
            pending[(side, offset)] = set(_ids(arrival.pairs))
            if arrival.outcome is Outcome.LATE:
                proc.count_late(side, P, offset)
        handled += len(batch)
        expiry = proc.plan_expiry(P)
        if not expiry.empty:  # the flush: everything sent so far is delivered
            pending.clear()
            unmatched |= set(_ids(expiry.unmatched))
            expiry.apply()
        proc.write_through()

    on_time = {side: _on_time(window, sides[side]) for side in Side}
    valid = {
        (i, j)
        for i, (lk, lt) in on_time[Side.LEFT].items()
        for j, (rk, rt) in on_time[Side.RIGHT].items()
        if lk == rk and window.matches(lt, rt)
    }
    # Each side is read again from an offset at or before its first record whose output was
    # lost (the commit comes after a flush), then on to the end of the input.
    start = {
        side: min(
            [o for s, o in pending if s is side] + [offsets[side]],
        )
        for side in Side
    }
    start = {side: min(start[side], run["from_offset"][side]) for side in Side}
    again = [side for side in Side for _ in range(len(sides[side]) - start[side])]
    replay_order = list(run["replay_order"])
    # Reuse the drawn interleaving where it fits, else the sides one after the other.
    if sorted(replay_order) != sorted(again):
        replay_order = again
    restarted = over((left, right))
    offsets = dict(start)
    for batch in _batches(replay_order, size):
        for side in batch:
            offset = offsets[side]
            offsets[side] += 1
            key, time_ms = sides[side][offset]
            arrival = restarted.process(side, P, key, Entry(offset, time_ms))
            emitted = set(_ids(arrival.pairs))
            assert emitted <= valid
            assert emitted >= pending.get((side, offset), set()), (side, offset)
            if arrival.outcome is Outcome.LATE:
                restarted.count_late(side, P, offset)
        expiry = restarted.plan_expiry(P)
        unmatched |= set(_ids(expiry.unmatched))
        expiry.apply()
        restarted.write_through()

    end = 10 * _last_time(sides) + 100_000
    for n, time_ms in enumerate((end, end + 10_000)):
        for side in Side:
            restarted.process(side, P, "end", Entry(len(sides[side]) + n, time_ms))
            unmatched |= _sweep(restarted)
            restarted.write_through()
    for store in (left, right):
        assert [k for k in store if k.startswith("k/")] == ["k/end"]
    matched = {side: {pair[0 if side is Side.LEFT else 1] for pair in valid} for side in Side}
    expected = {
        (i, None) if side is Side.LEFT else (None, i)
        for side in Side
        if kind.emits_unmatched(side)
        for i in on_time[side]
        if i not in matched[side]
    }
    assert unmatched == expected
