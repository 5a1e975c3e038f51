"""A worker restoring state says so at a steady interval: partitions, records done/left, rate."""

from __future__ import annotations

import logging
from pathlib import Path

import faust
import pytest
from faust.types import TP

from assignor.metadata_codec import MemberAssignment
from standby.runtime import PROGRESS_INTERVAL_S, ReplicaRuntime

CHANGELOG = "rt-counts-changelog"


async def test_active_restore_progress_is_logged_every_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = faust.App("rt", store="rocksdb://", datadir=str(tmp_path))
    app.Table("counts", default=int, partitions=2)
    now = [100.0]
    runtime = ReplicaRuntime(
        app, acceptable_recovery_lag=10, probing_interval_s=30, clock=lambda: now[0]
    )
    recovery = app.tables.recovery  # type: ignore[attr-defined]
    tps = [TP(CHANGELOG, 0), TP(CHANGELOG, 1)]
    # Faust's recovery at the start of a restore: local state at 99 and -1, ends at 999.
    recovery.active_tps.update(tps)
    # (Faust's offsets are Counters: assign, as Faust does; Counter.update would add.)
    recovery.active_offsets[tps[0]], recovery.active_offsets[tps[1]] = 99, -1
    runtime.on_assigned()
    runtime.on_assignment(MemberAssignment(generation=1, active={CHANGELOG: [0, 1]}))
    recovery.in_recovery = True
    recovery.active_highwaters[tps[0]] = recovery.active_highwaters[tps[1]] = 999
    with caplog.at_level(logging.INFO, logger="standby.runtime"):
        await runtime.tick()
        recovery.active_offsets[tps[0]], recovery.active_offsets[tps[1]] = 599, 499
        now[0] += PROGRESS_INTERVAL_S / 2
        await runtime.tick()  # inside the interval: quiet
        now[0] += PROGRESS_INTERVAL_S / 2
        await runtime.tick()
    lines = [r.getMessage() for r in caplog.records if "restoring actives" in r.getMessage()]
    assert len(lines) == 2
    assert "2 partition(s), 0 records done, 1,900 remaining" in lines[0]
    assert "1,000 records done, 900 remaining, 200 records/s" in lines[1]


def test_a_new_assignment_forgets_the_lags_and_the_ends_they_were_measured_against(
    tmp_path: Path,
) -> None:
    # The view shows both; a lag of the old assignment's replicas, or an end without its lag,
    # would be read as a measure of the new one.
    app = faust.App("rt-new", store="rocksdb://", datadir=str(tmp_path))
    runtime = ReplicaRuntime(app, acceptable_recovery_lag=10, probing_interval_s=30)
    runtime.replica_lag = {TP(CHANGELOG, 0): 3}
    runtime.replica_ends = {TP(CHANGELOG, 0): 1207}
    runtime.on_assignment(MemberAssignment(generation=2, standby={CHANGELOG: [1]}))
    assert runtime.replica_lag == {} and runtime.replica_ends == {}
