from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCENARIOS = Path(__file__).resolve().parents[3] / "tests" / "data" / "scenarios" / "shared"


def _streamapp(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamapp", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_plan_is_the_assignor_command() -> None:
    result = _streamapp("plan", str(SCENARIOS / "kip54-member-leaves.json"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["strategy"] == "stateful"
    assert _streamapp("plan", "--help").returncode == 0


def test_plan_bad_input_is_one_line_and_exit_2() -> None:
    result = _streamapp("plan", "-", stdin='{"topics": {"a": 0}, "members": {}}')
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "topics.a" in lines[0]


def test_worker_refuses_a_bad_app_spec_in_one_line(tmp_path: Path) -> None:
    result = _streamapp("worker", "-A", "no_such_module_xyz:app", "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "streamapp worker: -A 'no_such_module_xyz:app': cannot import 'no_such_module_xyz': "
        "No module named 'no_such_module_xyz'"
    ]


def test_kafka_status_when_nothing_runs(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "streamapp", "kafka", "status", "--port", "1"],
        capture_output=True,
        text=True,
        check=False,
        env={"STREAMAPP_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 3
    assert result.stdout.startswith("not running")
