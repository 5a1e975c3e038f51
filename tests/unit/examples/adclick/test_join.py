"""The join decisions without a broker: arrival order, lateness, unmatched clicks, expiry."""

from __future__ import annotations

from examples.adclick.join import (
    ExpiryBuckets,
    ImpressionState,
    JoinWindow,
    Outcome,
    PartitionClocks,
    expire_pending,
    impression_expired,
    on_click,
    on_impression,
    pending_from_json,
    pending_to_json,
)
from examples.adclick.model import Attribution, Click, Impression

WINDOW = JoinWindow(size_ms=10_000, grace_ms=2_000)
IMP = Impression("a1", "campaign-01", 250_000, event_time_ms=100_000)


def click(ms_after: int, click_id: str = "c1") -> Click:
    return Click(click_id, "a1", IMP.event_time_ms + ms_after)


def test_click_after_impression_in_window_is_attributed() -> None:
    stored = on_impression(WINDOW, None, (), IMP)
    assert stored.attributions == ()
    decision = on_click(WINDOW, stored.impression_state, (), click(3_000))
    assert decision.outcome is Outcome.JOINED
    assert decision.attribution == Attribution(
        "c1", "a1", "campaign-01", 250_000, impression_time_ms=100_000, click_time_ms=103_000
    )
    assert decision.impression_state is not None
    assert decision.impression_state.decided_clicks == (("c1", 103_000, False),)


def test_window_bounds_are_inclusive() -> None:
    state = ImpressionState(IMP)
    assert on_click(WINDOW, state, (), click(0)).outcome is Outcome.JOINED
    assert on_click(WINDOW, state, (), click(10_000)).outcome is Outcome.JOINED
    assert on_click(WINDOW, state, (), click(10_001)).outcome is Outcome.LATE
    assert on_click(WINDOW, state, (), click(-1)).outcome is Outcome.EARLY


def test_click_before_impression_waits_then_joins() -> None:
    first = on_click(WINDOW, None, (), click(500))
    assert first.outcome is Outcome.PENDING
    assert first.attribution is None
    assert first.pending == (click(500),)
    joined = on_impression(WINDOW, None, first.pending, IMP)
    assert [a.click_id for a in joined.attributions] == ["c1"]
    assert joined.resolved == ((click(500), Outcome.JOINED),)
    # The impression owns this attribution: replaying the click emits nothing...
    again = on_click(WINDOW, joined.impression_state, (), click(500))
    assert again.outcome is Outcome.DUPLICATE_CLICK
    assert again.attribution is None
    assert again.impression_state is None  # nothing to store
    # ...replaying the impression emits it once more, identical.
    replayed = on_impression(WINDOW, joined.impression_state, (), IMP)
    assert replayed.duplicate
    assert replayed.attributions == joined.attributions


def test_replayed_click_that_joined_on_arrival_emits_its_attribution_again() -> None:
    state = on_impression(WINDOW, None, (), IMP).impression_state
    first = on_click(WINDOW, state, (), click(2_000))
    again = on_click(WINDOW, first.impression_state, (), click(2_000))
    assert again.outcome is Outcome.DUPLICATE_CLICK
    assert again.attribution == first.attribution
    # The impression does not own it: replaying the impression does not emit it.
    assert on_impression(WINDOW, first.impression_state, (), IMP).attributions == ()


def test_pending_late_click_is_counted_late_not_joined() -> None:
    pending = on_click(WINDOW, None, (), click(12_000)).pending
    assert pending is not None
    decision = on_impression(WINDOW, None, pending, IMP)
    assert decision.attributions == ()
    assert decision.resolved == ((click(12_000), Outcome.LATE),)


def test_duplicate_click_while_pending_is_not_kept_twice() -> None:
    pending = on_click(WINDOW, None, (), click(1)).pending
    assert pending is not None
    assert on_click(WINDOW, None, pending, click(1)).outcome is Outcome.DUPLICATE_CLICK


def test_two_distinct_clicks_on_one_auction_are_both_attributed() -> None:
    state = on_impression(WINDOW, None, (), IMP).impression_state
    first = on_click(WINDOW, state, (), click(1_000, "c1"))
    second = on_click(WINDOW, first.impression_state, (), click(2_000, "c2"))
    assert first.outcome is second.outcome is Outcome.JOINED
    assert second.impression_state is not None
    assert [d[0] for d in second.impression_state.decided_clicks] == ["c1", "c2"]


def test_second_impression_of_an_auction_keeps_the_first() -> None:
    pending = on_click(WINDOW, None, (), click(1_000, "in")).pending
    assert pending is not None
    first = on_impression(WINDOW, None, pending, IMP)
    late = on_click(WINDOW, first.impression_state, (), click(11_000, "late"))
    assert late.outcome is Outcome.LATE
    other = Impression("a1", "campaign-99", 1, IMP.event_time_ms + 5)
    decision = on_impression(WINDOW, late.impression_state, (), other)
    assert decision.duplicate
    assert decision.impression_state.impression == IMP
    # Only the in-window click it resolved is attributed again, to the first impression.
    assert decision.attributions == first.attributions
    assert [a.campaign for a in decision.attributions] == ["campaign-01"]


def test_late_click_replayed_is_still_not_attributed() -> None:
    state = ImpressionState(IMP)
    first = on_click(WINDOW, state, (), click(10_500))
    again = on_click(WINDOW, first.impression_state, (), click(10_500))
    assert again.outcome is Outcome.DUPLICATE_CLICK
    assert again.attribution is None


def test_impression_expires_on_the_clicks_clock_only_after_window_and_grace() -> None:
    state = ImpressionState(IMP)
    edge = IMP.event_time_ms + WINDOW.size_ms + WINDOW.grace_ms
    assert not impression_expired(WINDOW, state, edge)
    assert impression_expired(WINDOW, state, edge + 1)


def test_pending_click_expires_as_unmatched_after_grace_on_the_impressions_clock() -> None:
    old, young = click(0, "old"), click(5_000, "young")
    keep, gone = expire_pending(WINDOW, (old, young), IMP.event_time_ms + 2_001)
    assert keep == (young,)
    assert gone == (old,)
    keep, gone = expire_pending(WINDOW, (old, young), IMP.event_time_ms + 2_000)
    assert keep == (old, young)
    assert gone == ()


def test_clocks_never_go_back() -> None:
    clocks = PartitionClocks()
    clocks.saw_click(click(5_000))
    clocks.saw_click(click(1_000))
    clocks.saw_impression(IMP)
    assert clocks.clicks_ms == IMP.event_time_ms + 5_000
    assert clocks.impressions_ms == IMP.event_time_ms


def test_expiry_buckets_sweep_only_buckets_the_clock_has_passed() -> None:
    buckets = ExpiryBuckets(width_ms=1_000)
    assert buckets.bucket_of(12_345) == 12
    assert buckets.due([], 50_000) == []
    assert buckets.due([12, 15], 12_999) == []  # bucket 12 ends at 13_000
    assert buckets.due([12, 15], 13_000) == [12]
    assert buckets.due([12, 15], 99_000) == [12, 15]
    # Every entry of a swept bucket really has expired by then.
    expires_after = 12_999
    bucket = buckets.bucket_of(expires_after)
    clock = (bucket + 1) * buckets.width_ms
    assert buckets.due([bucket], clock) == [bucket]
    assert clock > expires_after


def test_live_bucket_list_stays_sorted_without_repeats() -> None:
    assert ExpiryBuckets.with_bucket([], 7) == [7]
    assert ExpiryBuckets.with_bucket([3, 9], 7) == [3, 7, 9]
    assert ExpiryBuckets.with_bucket([3, 7, 9], 7) is None


def test_states_round_trip_through_json() -> None:
    state = ImpressionState(IMP, (("c1", 100_001, True), ("c2", 100_002, False)))
    assert ImpressionState.from_json(state.to_json()) == state
    pending = (click(1, "c1"), click(2, "c2"))
    assert pending_from_json(pending_to_json(pending)) == pending
    assert pending_from_json(None) == ()
