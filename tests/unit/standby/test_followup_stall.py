"""Warmups that make no progress stop triggering follow-up rebalances; and the
leader's check of member-reported offsets against the broker's end, over time."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import faust
import pytest
from faust.types import TP

from assignor.metadata_codec import MemberAssignment
from standby.followup import FollowupScheduler
from standby.lag import OffsetReportCheck, Readiness
from standby.runtime import ReplicaRuntime

A, B = ("cl", 0), ("cl", 1)


def _rebalance(s: FollowupScheduler, now: float, *, warmups: set[tuple[str, int]]) -> None:
    s.on_assignment(now, followup=True, own_warmups=len(warmups), group_warmups=2, warmups=warmups)


def test_three_fruitless_asks_then_no_more_until_the_warmups_change() -> None:
    s = FollowupScheduler(probing_interval_s=30, min_gap_s=2, max_fruitless_asks=3)
    now = 0.0
    asked = 0
    # The warmup holder is caught up (lag 0 beyond the acceptable) but the plan keeps parking
    # the task on a warmup: it would ask every few seconds for ever.
    for _ in range(6):
        _rebalance(s, now, warmups={A})
        now += 3
        if s.should_ask(now, warmups_caught_up=True, warmup_lags={A: 0}):
            asked += 1
    assert asked == 3
    assert s.stalled and not s.pending
    assert not s.should_ask(now + 1000, warmups_caught_up=True, warmup_lags={A: 0})
    # Another rebalance with the same warmups: still quiet.
    _rebalance(s, now, warmups={A})
    assert not s.should_ask(now + 1000, warmups_caught_up=True, warmup_lags={A: 0})
    # A plan with other warmups starts afresh.
    _rebalance(s, now, warmups={A, B})
    assert not s.stalled and s.pending
    assert s.should_ask(now + 3, warmups_caught_up=True, warmup_lags={A: 0, B: 0})


def test_a_warmup_that_gets_closer_keeps_asking() -> None:
    s = FollowupScheduler(probing_interval_s=10, min_gap_s=2, max_fruitless_asks=3)
    now = 0.0
    lag = 10_000
    for _ in range(8):  # a slow warmup: each probe finds it 1000 records closer
        _rebalance(s, now, warmups={A})
        now += 10
        assert s.should_ask(now, warmups_caught_up=False, warmup_lags={A: lag})
        lag -= 1000
    assert not s.stalled


def test_a_stalled_worker_asks_again_once_a_warmup_moves() -> None:
    s = FollowupScheduler(probing_interval_s=10, min_gap_s=2, max_fruitless_asks=2)
    now = 0.0
    for _ in range(3):
        _rebalance(s, now, warmups={A})
        now += 10
        s.should_ask(now, warmups_caught_up=False, warmup_lags={A: 500})
    assert s.stalled
    assert not s.should_ask(now + 1, warmups_caught_up=False, warmup_lags={A: 500})
    assert not s.should_ask(now + 2, warmups_caught_up=False, warmup_lags={A: 700})  # further
    assert s.should_ask(now + 3, warmups_caught_up=False, warmup_lags={A: 400})
    assert not s.stalled


def test_members_without_warmups_stop_probing_too() -> None:
    # Another member's warmup never moves (that member does not replay): probes at the interval
    # cannot see its lag, and stop after the same number.
    s = FollowupScheduler(probing_interval_s=5, min_gap_s=2, max_fruitless_asks=3)
    asked = 0
    now = 0.0
    for _ in range(5):
        s.on_assignment(now, followup=True, own_warmups=0, group_warmups=1)
        now += 5
        asked += s.should_ask(now, warmups_caught_up=True)
    assert asked == 3 and s.stalled


def test_a_followup_without_any_warmup_is_never_held_back() -> None:
    s = FollowupScheduler(probing_interval_s=5, min_gap_s=2, max_fruitless_asks=1)
    for i in range(4):
        s.on_assignment(10.0 * i, followup=True, own_warmups=0, group_warmups=0)
        assert s.should_ask(10.0 * i + 3, warmups_caught_up=True)


def test_a_followup_asked_for_is_still_coming_until_the_next_assignment() -> None:
    s = FollowupScheduler(probing_interval_s=5, min_gap_s=2)
    s.on_assignment(0.0, followup=True, own_warmups=0, group_warmups=0)
    assert s.pending and s.coming
    assert s.should_ask(3.0, warmups_caught_up=True)
    # Asked: this worker will not ask again, but the group's rebalance has not come yet.
    assert not s.pending and s.coming
    s.on_assignment(3.1, followup=False, own_warmups=0, group_warmups=0)
    assert not s.pending and not s.coming


def test_readiness_beyond_is_zero_once_caught_up() -> None:
    assert Readiness(acceptable_recovery_lag=100).beyond({A: 40, B: 350}) == {A: 0, B: 250}


def test_offset_reports_are_false_only_if_the_end_stays_below_past_the_grace() -> None:
    check: OffsetReportCheck[tuple[str, int]] = OffsetReportCheck(grace_s=10)
    everyone = {"m-1", "m-x"}
    check.note(0.0, {"m-1": ("w1", {A: 130}), "m-x": ("x", {A: 10**9, B: 10**9})}, present=everyone)
    assert check.check(5.0, {A: 100, B: 100}) == []  # too early to say
    # Rebalances keep coming: a suspect keeps the time it first was one.
    check.note(6.0, {"m-1": ("w1", {A: 140}), "m-x": ("x", {A: 10**9, B: 10**9})}, present=everyone)
    found = check.check(10.0, {A: 150, B: 100})
    # m-1 was early (the end has passed 140 by now), m-x was not.
    assert [(f.member_id, f.client_id, dict(f.offsets), f.first) for f in found] == [
        ("m-x", "x", {A: (10**9, 150), B: (10**9, 100)}, True)
    ]
    assert check.false_offsets == {"m-x": frozenset({A, B})}
    assert check.check(20.0, {A: 150, B: 100}) == []  # settled: not checked again
    # It keeps reporting A above the end, B no more (rebuilt): only A stays false.
    check.note(30.0, {"m-x": ("x", {A: 10**9})}, present=everyone)
    assert check.false_offsets == {"m-x": frozenset({A})}
    # Found out again later (another partition), it is not named a second time.
    check.note(40.0, {"m-x": ("x", {A: 10**9, B: 10**9})}, present=everyone)
    assert [f.first for f in check.check(55.0, {A: 150, B: 100})] == [False]
    check.note(60.0, {}, present={"m-1"})  # it left the group
    assert check.false_offsets == {}


def test_an_end_not_read_keeps_a_report_pending() -> None:
    check: OffsetReportCheck[tuple[str, int]] = OffsetReportCheck(grace_s=10)
    check.note(0.0, {"m-1": ("w1", {A: 130})}, present={"m-1"})
    assert check.check(20.0, {B: 5}) == []
    assert check.check(21.0, {A: 129}) != []


class _Consumer:
    started = True

    def __init__(self, ends: dict[TP, int]) -> None:
        self.ends = ends
        self.asked: list[set[TP]] = []

    def topic_partitions(self, topic: str) -> int | None:
        return 2

    async def highwaters(self, *tps: TP) -> Mapping[TP, int]:
        self.asked.append(set(tps))
        return {tp: self.ends[tp] for tp in tps}


async def test_runtime_reads_every_changelog_end_and_warns_once_when_warmups_stall(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = faust.App("rt-stall", store="rocksdb://", datadir=str(tmp_path))
    app.Table("counts", default=int, partitions=2)
    app.GlobalTable("settings", default=int, partitions=3)
    changelog = "rt-stall-counts-changelog"
    warm = TP(changelog, 1)
    consumer = _Consumer({TP(changelog, 0): 5000, warm: 5000})
    app.consumer = consumer  # type: ignore[assignment]
    now = [0.0]
    runtime = ReplicaRuntime(
        app, acceptable_recovery_lag=100, probing_interval_s=30, clock=lambda: now[0]
    )
    asked: list[float] = []
    runtime.request_rebalance = lambda: asked.append(now[0])  # type: ignore[method-assign]
    recovery = app.tables.recovery  # type: ignore[attr-defined]
    recovery.standby_offsets[warm] = 1999  # replayed to 2000 of 5000, and stuck there
    share = MemberAssignment(
        generation=3,
        active={changelog: [0]},
        warmup={changelog: [1]},
        followup_rebalance=True,
        warmups_in_group=1,
    )
    with caplog.at_level(logging.INFO, logger="standby.runtime"):
        for _ in range(6):  # each follow-up brings the same plan back
            runtime.on_assignment(share)
            now[0] += 31
            await runtime.tick()
    assert len(asked) == 3
    # Every changelog partition of the app's (non-global) tables, not only the replicas.
    assert consumer.asked[-1] == {TP(changelog, 0), warm}
    assert runtime.changelog_ends == {TP(changelog, 0): 5000, warm: 5000}
    stalled = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(stalled) == 1, stalled
    assert "no more follow-up rebalances: 3 asked in a row" in stalled[0]
    assert f"lag: {changelog}[1]=3000" in stalled[0]
    # The warmup moves again: the worker asks at its next tick.
    recovery.standby_offsets[warm] = 2999
    now[0] += 1
    await runtime.tick()
    assert len(asked) == 4
