"""The ad-click demo end to end on the session's real broker: three real workers, one killed
with SIGKILL mid-run and restarted, and Spark (local[2], its Kafka source) reconciling the
joined output against its own batch join of the raw topics."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _import(name: str) -> ModuleType:
    # `examples/` is not an installed package: import it from this checkout.
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    return importlib.import_module(name)


def _run_demo(kafka_bootstrap: str, tmp_path: Path, *extra: str) -> Any:
    demo = _import("examples.adclick.demo")
    args = demo.build_parser().parse_args(
        [
            "--bootstrap",
            kafka_bootstrap,
            "--events",
            "4000",
            "--rate",
            "400",
            "--window-ms",
            "5000",
            "--kill-at",
            "0.4",
            "--data-dir",
            str(tmp_path / "demo"),
            "--report-dir",
            str(tmp_path / "report"),
            "--timeout",
            "120",
            *extra,
        ]
    )
    return demo.run_demo(args)


def _assert_nothing_lost(result: Any) -> None:
    r, truth = result.reconciliation, result.truth
    # The worker was really killed and came back on its data dir.
    assert result.restarts == 1
    # Spark's reference join agrees with what the generator built in...
    assert r.expected == truth.in_window_clicks > 100
    assert r.undecodable == truth.undecodable > 0
    # ...and the streaming output has every attribution, each one right.
    assert r.missing == 0, r.samples["missing"]
    assert r.mismatched == 0, r.samples["mismatched"]
    assert r.unexpected == 0, r.samples["unexpected"]
    assert r.joined == r.expected
    # Every undecodable record is in the dead-letter topic, once per source offset.
    assert len(result.dead_letter_sources) == truth.undecodable
    # The report exists for people too.
    assert result.report["chart"].stat().st_size > 1000
    assert "missing | 0" in result.report["markdown"].read_text()
    # Spark's own output went to its log file, which the demo names at the end.
    assert result.report["spark_log"].name == "spark.log"
    assert result.report["spark_log"].is_file()
    assert result.summary_line().startswith(f"demo: 4000 events, {r.joined} joined, 0 missing, ")


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_demo_at_least_once_with_a_worker_crash_loses_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    result = _run_demo(kafka_bootstrap, tmp_path, "--at-least-once")
    assert result.processing_guarantee == "at_least_once"
    _assert_nothing_lost(result)
    # Late clicks and dead letters are counted, not dropped in silence (at-least-once
    # replays may count a record twice, never zero times).
    assert result.counters.get("late", 0) >= 1
    assert result.counters.get("dead_letter", 0) >= result.truth.undecodable
    # A click without impression is unmatched once it expires, or still pending at the end.
    unmatched = result.counters.get("unmatched", 0) + result.pending_at_end
    assert unmatched >= result.truth.orphan_clicks > 0
    # The per-campaign aggregate (a batch agent) counted every attributed click.
    truth = result.truth.per_campaign_clicks
    assert {c: min(n, truth.get(c, 0)) for c, n in result.campaign_clicks.items()} == truth


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_demo_exactly_once_by_default_with_a_worker_crash_loses_and_repeats_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    result = _run_demo(kafka_bootstrap, tmp_path)
    assert result.processing_guarantee == "exactly_once"
    _assert_nothing_lost(result)
    r, truth = result.reconciliation, result.truth
    # The tables' state is exact too: the killed worker's stores held only what its committed
    # transactions wrote, so no input is counted twice...
    assert result.counters.get("late", 0) == truth.late_clicks > 0
    assert result.counters.get("dead_letter", 0) == truth.undecodable
    assert result.counters.get("duplicate_click", 0) == 0
    unmatched = result.counters.get("unmatched", 0) + result.pending_at_end
    assert unmatched == truth.orphan_clicks > 0
    # The per-campaign aggregate (a batch agent) counted each attributed click once.
    assert result.campaign_clicks == truth.per_campaign_clicks
    # ...though the restarted worker kept every store it had (transactional stores), replaying
    # only their tails.
    victim_log = (tmp_path / "demo" / "worker-2.log").read_text(errors="replace")
    assert "discarding" not in victim_log
    # ...and the output has each attribution exactly once.
    assert r.duplicated == 0, r.samples["duplicated"]
    assert r.output_records == r.expected
