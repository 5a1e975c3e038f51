"""The demo's attribution without a broker: the rule, and the framework join it runs on.

`Demo` feeds clicks and impressions through `streamapp.joins.core.JoinProcessor` over two dicts,
configured as examples/adclick/app.py configures `WindowedJoin` (left join, clicks on the
left, the widened window, click and auction ids), and judges each output as the app does.
"""

from __future__ import annotations

import json
from collections import Counter

from examples.adclick.attribution import AttributionWindow, Verdict, attribute, counted, judge
from examples.adclick.model import (
    Attribution,
    Click,
    Impression,
    decode_click,
    decode_impression,
    encode,
)
from streamapp.joins.core import Entry, ExpiryIndex, JoinProcessor, Outcome
from streamapp.joins.window import JoinKind, Side

WINDOW = AttributionWindow(size_ms=10_000, grace_ms=2_000)
IMP = Impression("a1", "campaign-01", 250_000, event_time_ms=100_000)
P = 0


def click(ms_after: int, click_id: str = "c1", auction_id: str = "a1") -> Click:
    return Click(click_id, auction_id, IMP.event_time_ms + ms_after)


class Demo:
    """The app's use of the join, without Faust: attributions out, verdicts counted."""

    def __init__(self, width_ms: int = 1) -> None:
        self.proc = JoinProcessor(
            WINDOW.join_window(), JoinKind.LEFT, {}, {}, index=ExpiryIndex(width_ms)
        )
        self.offsets = {Side.LEFT: 0, Side.RIGHT: 0}
        self.attributions: list[Attribution] = []
        self.counters: Counter[str] = Counter()

    def feed(self, record: Click | Impression, offset: int | None = None) -> Outcome:
        side = Side.LEFT if isinstance(record, Click) else Side.RIGHT
        if offset is None:
            offset = self.offsets[side]
            self.offsets[side] += 1
        record_id = record.click_id if isinstance(record, Click) else record.auction_id
        entry = Entry(offset, record.event_time_ms, encode(record).decode(), id=record_id)
        arrival = self.proc.process(side, P, record.auction_id, entry)
        if arrival.outcome is Outcome.LATE:
            self.proc.count_late(side, P, offset)
        verdict = counted(side, arrival.outcome)
        if verdict is not None:
            self.counters[verdict.value] += 1
        expiry = self.proc.plan_expiry(P)
        for pair in (*arrival.pairs, *expiry.unmatched):
            assert pair.left is not None
            c = decode_click(pair.left.value.encode())
            i = decode_impression(pair.right.value.encode()) if pair.right else None
            v = judge(WINDOW, c, i)
            if v is Verdict.JOINED:
                assert i is not None
                self.attributions.append(attribute(i, c))
            else:
                self.counters[v.value] += 1
        expiry.apply()
        return arrival.outcome

    def pending(self) -> list[str]:
        """Click ids held with no impression met yet."""
        return [e.id or "" for e in self.proc.stored(Side.LEFT, "a1") if not e.matched]


def test_window_bounds_are_inclusive() -> None:
    assert WINDOW.classify(100, 100) is Verdict.JOINED
    assert WINDOW.classify(100, 10_100) is Verdict.JOINED
    assert WINDOW.classify(100, 10_101) is Verdict.LATE
    assert WINDOW.classify(100, 99) is Verdict.EARLY
    assert judge(WINDOW, click(0), None) is Verdict.UNMATCHED


def test_the_join_window_reaches_the_rule_widened_by_grace() -> None:
    w = WINDOW.join_window()
    t = IMP.event_time_ms
    # Clicks on the left: the impression from size + grace before to grace after the click.
    for click_ms, paired in [
        (t, True),
        (t + 10_000, True),
        (t + 12_000, True),  # late by grace: still met, counted late
        (t + 12_001, False),
        (t - 2_000, True),  # early by grace: still met, counted early
        (t - 2_001, False),
    ]:
        assert w.matches(click_ms, t) is paired, click_ms
    assert w.grace_ms == WINDOW.grace_ms


def test_click_after_impression_in_window_is_attributed() -> None:
    demo = Demo()
    demo.feed(IMP)
    demo.feed(click(3_000))
    assert demo.attributions == [
        Attribution(
            "c1", "a1", "campaign-01", 250_000, impression_time_ms=100_000, click_time_ms=103_000
        )
    ]
    assert not demo.counters


def test_click_before_impression_waits_then_joins() -> None:
    demo = Demo()
    demo.feed(click(500))
    assert demo.attributions == []
    assert demo.pending() == ["c1"]
    demo.feed(IMP)
    assert [a.click_id for a in demo.attributions] == ["c1"]
    assert demo.pending() == []


def test_replay_after_a_crash_emits_the_attribution_again_and_counts_nothing() -> None:
    demo = Demo()
    demo.feed(IMP)
    demo.feed(click(2_000))
    assert demo.feed(click(2_000), offset=0) is Outcome.REPLAY
    assert [a.click_id for a in demo.attributions] == ["c1", "c1"]
    assert not demo.counters


def test_late_and_early_clicks_are_counted_not_attributed() -> None:
    demo = Demo()
    demo.feed(click(-1, "early"))  # before its impression: waits, then is judged early
    demo.feed(IMP)
    demo.feed(click(10_001, "late"))
    demo.feed(click(12_000, "late-by-grace"))
    assert demo.attributions == []
    assert demo.counters == {"late": 2, "early": 1}
    # Either side first: a late click held before its impression is judged late too.
    other = Demo()
    other.feed(click(12_000, "late"))
    other.feed(IMP)
    assert other.attributions == []
    assert other.counters == {"late": 1}


def test_duplicate_click_while_held_is_counted_not_kept_twice() -> None:
    demo = Demo()
    demo.feed(click(1))
    assert demo.feed(click(1)) is Outcome.DUPLICATE
    assert demo.pending() == ["c1"]
    demo.feed(IMP)
    assert [a.click_id for a in demo.attributions] == ["c1"]
    assert demo.counters == {"duplicate_click": 1}


def test_two_distinct_clicks_on_one_auction_are_both_attributed() -> None:
    demo = Demo()
    demo.feed(IMP)
    demo.feed(click(1_000, "c1"))
    demo.feed(click(2_000, "c2"))
    assert [a.click_id for a in demo.attributions] == ["c1", "c2"]


def test_second_impression_of_an_auction_keeps_the_first() -> None:
    demo = Demo()
    demo.feed(IMP)
    other = Impression("a1", "campaign-99", 1, IMP.event_time_ms + 5)
    assert demo.feed(other) is Outcome.DUPLICATE
    demo.feed(click(1_000))
    assert [a.campaign for a in demo.attributions] == ["campaign-01"]
    assert demo.counters == {"duplicate_impression": 1}


def test_click_without_impression_is_unmatched_after_grace_on_the_impressions_clock() -> None:
    demo = Demo()
    demo.feed(click(0, "orphan", auction_id="o1"))
    # The join reaches grace past the click, then grace more for the impressions' disorder.
    demo.feed(Impression("a2", "campaign-02", 1, IMP.event_time_ms + 4_000))
    assert demo.counters == {}
    demo.feed(Impression("a3", "campaign-02", 1, IMP.event_time_ms + 4_001))
    assert demo.counters == {"unmatched": 1}


def test_impression_expires_on_the_clicks_clock_only() -> None:
    demo = Demo()
    demo.feed(IMP)
    reach = WINDOW.size_ms + 2 * WINDOW.grace_ms
    demo.feed(click(reach, "other", auction_id="a2"))
    assert demo.proc.stored(Side.RIGHT, "a1")
    demo.feed(click(reach + 1, "other2", auction_id="a2"))
    assert demo.proc.stored(Side.RIGHT, "a1") == []


def test_out_of_order_beyond_grace_is_counted() -> None:
    demo = Demo()
    demo.feed(click(5_000, "new", auction_id="a2"))
    assert demo.feed(click(2_999, "old", auction_id="a3")) is Outcome.LATE
    assert demo.counters == {"out_of_order": 1}


def test_records_that_do_not_decode_are_counted_as_dead_letters() -> None:
    assert counted(Side.LEFT, Outcome.UNDECODABLE) is Verdict.DEAD_LETTER
    assert counted(Side.RIGHT, Outcome.UNDECODABLE) is Verdict.DEAD_LETTER
    assert counted(Side.LEFT, Outcome.ACCEPTED) is None
    assert counted(Side.LEFT, Outcome.SKIPPED) is None


def test_stored_values_are_the_wire_format() -> None:
    assert json.loads(encode(IMP))["auction_id"] == "a1"
