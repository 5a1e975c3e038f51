"""`plan` on hostile input: one line on stderr and exit 2, never a traceback or a dead machine.

Input that once crashed the command: JSON nested 100,000 levels deep (RecursionError in the
decoder), a number longer than Python converts (ValueError), and a partition count of
10**14 (MemoryError while planning).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import assignor.cli
from assignor import ScenarioError
from assignor.cli import main
from assignor.scenario_parser import (
    MAX_PARTITIONS_PER_TOPIC,
    MAX_PARTITIONS_TOTAL,
    parse_scenario,
)
from tests.paths import REPO_ROOT


def _scenario(topics: dict[str, int]) -> dict[str, Any]:
    return {"topics": topics, "members": {"m-a": {"subscription": sorted(topics)}}}


def _plan_subprocess(stdin: str) -> str:
    """Run ``python -m assignor plan -``; return its one stderr line after checking the rest."""
    run = subprocess.run(
        [sys.executable, "-m", "assignor", "plan", "-"],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr[-2000:]
    return lines[0]


def test_json_nested_100k_levels_deep() -> None:
    line = _plan_subprocess("[" * 100_000 + "]" * 100_000)
    assert line == (
        "assignor: error: stdin: JSON nested too deeply to decode "
        "(a scenario nests at most 5 levels)"
    )


def test_partition_count_of_10_to_the_14() -> None:
    line = _plan_subprocess(json.dumps(_scenario({"orders": 10**14})))
    assert line == (
        "assignor: error: topics.orders: partition count 100000000000000 is above the limit "
        "of 1,000,000 partitions per topic"
    )


def test_a_number_too_long_to_decode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "long.json"
    path.write_text('{"topics": {"orders": ' + "9" * 5000 + '}, "members": {}}')
    assert main(["plan", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"assignor: error: {path}: a number has more than {sys.get_int_max_str_digits()} digits\n"
    )


def test_limits_are_inclusive() -> None:
    at_limit = parse_scenario(_scenario({"orders": MAX_PARTITIONS_PER_TOPIC}))
    assert at_limit.topics == {"orders": MAX_PARTITIONS_PER_TOPIC}
    with pytest.raises(ScenarioError, match=r"^topics\.orders: partition count 1000001 is above"):
        parse_scenario(_scenario({"orders": MAX_PARTITIONS_PER_TOPIC + 1}))
    per_topic = MAX_PARTITIONS_TOTAL // 2
    both = parse_scenario(_scenario({"a": per_topic, "b": MAX_PARTITIONS_TOTAL - per_topic}))
    assert sum(both.topics.values()) == MAX_PARTITIONS_TOTAL


def test_many_topics_within_the_per_topic_limit_are_bounded_together() -> None:
    topics = {f"t{i}": MAX_PARTITIONS_PER_TOPIC for i in range(3)}
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(_scenario(topics))
    assert str(refused.value) == (
        "topics: 3,000,000 partitions in all topics together is above the limit of "
        "2,000,000 per scenario"
    )


def test_out_of_memory_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What no limit foresees still ends in one line (the plan is faked to run out)."""

    def exhausted(scenario: object, *, strategy: str) -> dict[str, Any]:
        raise MemoryError

    monkeypatch.setattr(assignor.cli, "plan", exhausted)
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(_scenario({"orders": 4})))
    assert main(["plan", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "assignor: error: out of memory reading or planning this scenario\n"
