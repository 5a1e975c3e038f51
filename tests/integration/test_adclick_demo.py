"""The ad-click demo end to end on the session's real broker: three real workers, one killed
with SIGKILL mid-run and restarted, and Spark (local[2], its Kafka source) reconciling the
joined output against its own batch join of the raw topics."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _import(name: str) -> ModuleType:
    # `examples/` is not an installed package: import it from this checkout.
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    return importlib.import_module(name)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_demo_with_a_worker_crash_loses_nothing(kafka_bootstrap: str, tmp_path: Path) -> None:
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
        ]
    )
    result = demo.run_demo(args)
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
    # Late clicks and dead letters are counted, not dropped in silence (at-least-once
    # replays may count a record twice, never zero times).
    assert result.counters.get("late", 0) >= 1
    assert result.counters.get("dead_letter", 0) >= truth.undecodable
    # Every undecodable record is in the dead-letter topic, once per source offset.
    assert len(result.dead_letter_sources) == truth.undecodable
    # The report exists for people too.
    assert result.report["chart"].stat().st_size > 1000
    assert "missing | 0" in result.report["markdown"].read_text()
    assert result.summary_line().startswith(f"demo: 4000 events, {r.joined} joined, 0 missing, ")
