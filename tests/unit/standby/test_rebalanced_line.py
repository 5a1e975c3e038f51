"""After each rebalance a worker logs one line: what it holds now and what moved in or out."""

from __future__ import annotations

import logging
from pathlib import Path

import faust
import pytest

from assignor.metadata_codec import MemberAssignment
from standby.runtime import ReplicaRuntime, rebalanced_text

SOURCE = "rt-events"
CHANGELOG = "rt-counts-changelog"
LEADER = "rt-__assignor-__leader"


def test_the_line_names_tasks_by_topic_and_what_moved() -> None:
    before = MemberAssignment(
        generation=1, active={SOURCE: [0, 1, 2, 3], CHANGELOG: [0, 1, 2, 3], LEADER: [0]}
    )
    after = MemberAssignment(
        generation=2,
        active={SOURCE: [0, 1], CHANGELOG: [0, 1], LEADER: [0]},
        standby={CHANGELOG: [2, 3]},
    )
    assert rebalanced_text(before, after) == (
        "streamapp: rebalanced (plan generation 2): "
        f"active {CHANGELOG} 0, 1; {SOURCE} 0, 1 | standby {CHANGELOG} 2, 3 | warmup - | "
        f"moved in - | moved out {CHANGELOG} 2, 3; {SOURCE} 2, 3"
    )
    first = rebalanced_text(None, MemberAssignment(generation=1, warmup={CHANGELOG: [1]}))
    assert first.endswith(
        "active - | standby - | warmup rt-counts-changelog 1 | moved in - | moved out -"
    )


async def test_the_runtime_logs_it_once_per_assignment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = faust.App("rt", store="rocksdb://", datadir=str(tmp_path))
    app.Table("counts", default=int, partitions=2)
    runtime = ReplicaRuntime(app, acceptable_recovery_lag=10, probing_interval_s=30)
    with caplog.at_level(logging.INFO, logger="standby.runtime"):
        runtime.on_assigned()  # stock Faust's assignor: no share, no line
        runtime.on_assignment(MemberAssignment(generation=1, active={SOURCE: [0, 1]}))
        runtime.on_assigned()
        runtime.on_assigned()  # the same share again: said already
        runtime.on_assignment(MemberAssignment(generation=2, active={SOURCE: [1]}))
        runtime.on_assigned()
    lines = [r.getMessage() for r in caplog.records if "rebalanced" in r.getMessage()]
    assert [line.split(": ", 1)[1] for line in lines] == [
        f"rebalanced (plan generation 1): active {SOURCE} 0, 1 | standby - | warmup - | "
        f"moved in {SOURCE} 0, 1 | moved out -",
        f"rebalanced (plan generation 2): active {SOURCE} 1 | standby - | warmup - | "
        f"moved in - | moved out {SOURCE} 0",
    ]
    assert all(r.levelno == logging.INFO for r in caplog.records if "rebalanced" in r.getMessage())
