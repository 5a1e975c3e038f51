"""Replica lag and readiness, the follow-up scheduler, the recovery meter, progress lines."""

from __future__ import annotations

from standby.followup import FollowupScheduler
from standby.lag import Readiness, lags
from standby.progress import ProgressMeter
from standby.recovery_meter import RecoveryMeter

A, B, C = ("cl", 0), ("cl", 1), ("cl", 2)


def test_lags_and_readiness() -> None:
    lag = lags({A: 90, B: 100}, {A: 100, B: 100, C: 50})
    assert lag == {A: 10, B: 0, C: 50}
    ready = Readiness(acceptable_recovery_lag=10)
    assert ready.caught_up(lag, {A, B})
    assert not ready.caught_up(lag, {A, C})
    assert not ready.caught_up({}, {A})  # an unknown lag is not caught up
    assert ready.caught_up(lag, set())


def test_warmup_holder_asks_once_caught_up_but_not_too_soon() -> None:
    s = FollowupScheduler(probing_interval_s=60, min_gap_s=2)
    s.on_assignment(100.0, followup=True, own_warmups=1, group_warmups=1)
    assert not s.should_ask(101.0, warmups_caught_up=True)  # inside the minimum gap
    assert not s.should_ask(103.0, warmups_caught_up=False)
    assert s.should_ask(103.0, warmups_caught_up=True)
    assert not s.should_ask(104.0, warmups_caught_up=True)  # once per assignment
    s.on_assignment(200.0, followup=True, own_warmups=1, group_warmups=1)
    assert not s.should_ask(259.0, warmups_caught_up=False)
    assert s.should_ask(260.0, warmups_caught_up=False)  # the probing rebalance


def test_others_wait_for_the_warmup_holder_or_probe() -> None:
    s = FollowupScheduler(probing_interval_s=30, min_gap_s=2)
    s.on_assignment(0.0, followup=True, own_warmups=0, group_warmups=2)
    assert not s.should_ask(29.0, warmups_caught_up=True)
    assert s.should_ask(30.0, warmups_caught_up=True)


def test_followup_without_warmups_asks_after_the_gap_and_none_without_followup() -> None:
    s = FollowupScheduler(probing_interval_s=30, min_gap_s=2)
    s.on_assignment(0.0, followup=True, own_warmups=0, group_warmups=0)
    assert not s.should_ask(1.0, warmups_caught_up=True)
    assert s.should_ask(2.5, warmups_caught_up=True)
    s.on_assignment(10.0, followup=False, own_warmups=0, group_warmups=0)
    assert not s.pending
    assert not s.should_ask(1000.0, warmups_caught_up=True)


def test_recovery_meter_counts_the_tail_and_the_time() -> None:
    m = RecoveryMeter()
    m.on_revoked(10.0)
    m.on_revoked(10.5)  # an interrupted rebalance: the clock runs from the first revoke
    m.on_assigned(11.0, {A: 100, B: 0})
    m.on_resumed(12.5, {A: 130, B: 0})
    assert m.as_json() == {
        "records_replayed_total": 30,
        "last_rebalance": {
            "records_replayed": 30,
            "seconds_to_resume": 2.5,
            "by_partition": {"cl": {"0": 30, "1": 0}},
        },
    }
    m.on_resumed(13.0, {A: 500})  # no new assignment: nothing more to count
    m.on_assigned(20.0, {C: 5})  # first assignment without a revoke: from the assignment
    m.on_resumed(21.0, {C: 25})
    assert m.records_replayed_total == 50
    assert m.last_seconds_to_resume == 1.0
    assert m.last_replayed_by_partition == {C: 20}
    assert m.rebalances == 2


def test_recovery_meter_counts_a_replay_cut_short_by_the_next_rebalance_from_its_start() -> None:
    m = RecoveryMeter()
    m.on_assigned(1.0, {A: 0, B: 40})
    # A rebalance in the middle of the replay: A got to 900 (its local state now), B is gone,
    # C is new.
    m.on_assigned(2.0, {A: 900, C: 10})
    m.on_resumed(3.0, {A: 1000, C: 15})
    assert m.last_replayed_by_partition == {A: 1000, C: 5}
    assert m.records_replayed_total == 1005
    # The next assignment after a resume starts afresh.
    m.on_assigned(4.0, {A: 1000})
    m.on_resumed(5.0, {A: 1002})
    assert m.last_replayed_by_partition == {A: 2}


def test_progress_line_has_rate_and_remaining() -> None:
    p = ProgressMeter()
    first = p.line(0.0, "actives", 3, 0, 1000)
    assert "3 partition(s)" in first and "1,000 remaining" in first
    second = p.line(2.0, "actives", 3, 500, 500)
    assert "250 records/s" in second and "500 records done" in second and "2 s left" in second
