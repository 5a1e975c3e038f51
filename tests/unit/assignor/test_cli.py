"""`python -m assignor plan`: JSON and table output, one-line errors, exit 2."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from assignor import plan
from assignor.cli import main
from tests.paths import REPO_ROOT

SCENARIO = {
    "topics": {"orders": 4, "orders-changelog": 4},
    "changelog_topics": ["orders-changelog"],
    "num_standbys": 1,
    "members": {
        "m-a": {
            "client_id": "worker-a",
            "host": "host-a",
            "subscription": ["orders", "orders-changelog"],
        },
        "m-b": {
            "client_id": "worker-b",
            "host": "host-b",
            "subscription": ["orders", "orders-changelog"],
        },
    },
}


def _write(tmp_path: Path, content: str) -> str:
    path = tmp_path / "scenario.json"
    path.write_text(content)
    return str(path)


def test_json_output_is_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", _write(tmp_path, json.dumps(SCENARIO))]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["strategy"] == "stateful"
    actives = [result["members"][m]["active"]["orders"] for m in ("m-a", "m-b")]
    assert sorted(p for ps in actives for p in ps) == [0, 1, 2, 3]
    assert [len(ps) for ps in actives] == [2, 2]


def test_table_shows_members_groups_and_stats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", _write(tmp_path, json.dumps(SCENARIO)), "--format", "table"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    # The columns are explained before the table, not after it.
    header_at = next(i for i, line in enumerate(lines) if line.startswith("member "))
    assert any(line.startswith("columns: g0, g1, ...") for line in lines[:header_at])
    assert "g0: 4 tasks, stateful: orders, orders-changelog" in lines[:header_at]
    header, _rule, row_a, row_b = lines[header_at : header_at + 4]
    assert header.split() == [
        *("member", "client", "host", "rack", "g0", "active", "standby", "warmup"),
    ]
    assert row_a.split() == ["m-a", "worker-a", "host-a", "-", "2", "2", "2", "0"]
    assert row_b.split() == ["m-b", "worker-b", "host-b", "-", "2", "2", "2", "0"]
    assert "standbys_missing: 0" in out and "moved_active: 0" in out


def test_table_lists_each_members_tasks_in_natural_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    members = {
        f"member-{n}": {
            "client_id": f"w{n}",
            "rack": f"rack-{n % 2}",
            "subscription": ["orders", "orders-changelog"],
        }
        for n in (10, 2, 1)
    }
    scenario = {
        "topics": {"orders": 6, "orders-changelog": 6},
        "changelog_topics": ["orders-changelog"],
        "num_standbys": 1,
        "members": members,
    }
    assert main(["plan", _write(tmp_path, json.dumps(scenario)), "--format", "table"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("member-")]
    # One row in the table, one line of tasks: each member twice, member-2 before member-10.
    assert [r[0] for r in rows] == ["member-1", "member-2", "member-10"] * 2
    assert rows[0][3] == "rack-1" and rows[2][3] == "rack-0"
    result = plan(scenario)
    for row in rows[3:]:
        share = result["members"][row[0]]
        assert row[1:3] == ["active", f"g0[{','.join(map(str, share['active']['orders']))}]"]
        standby = share["standby"]["orders-changelog"]
        assert row[3:5] == ["standby", f"g0[{','.join(map(str, standby))}]"]
        assert row[5:] == ["warmup", "-"]


def test_plan_help_names_the_command_and_explains_format(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "--help"], prog="streamapp") == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: streamapp plan ")
    assert "docs/assignment-rules.md" in out  # where the scenario format is
    format_help = " ".join(out[out.index("\n  --format") :].split())
    assert "table: for people" in format_help and "json: the result object" in format_help


def test_strategy_option_and_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(SCENARIO)))
    assert main(["plan", "-", "--strategy", "faust"]) == 0
    assert json.loads(capsys.readouterr().out)["strategy"] == "faust"


@pytest.mark.parametrize(
    ("content", "args", "expected"),
    [
        ("{not json", [], "not valid JSON"),
        ("[1]", [], "scenario: must be a JSON object"),
        (json.dumps({**SCENARIO, "topics": {"orders": 0}}), [], "topics.orders: partition count"),
        (json.dumps(SCENARIO), ["--strategy", "nope"], "strategy: unknown strategy 'nope'"),
        (json.dumps(SCENARIO), ["--format", "xml"], "argument --format: invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, args: list[str], expected: str
) -> None:
    assert main(["plan", _write(tmp_path, content), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert expected in captured.err


def test_missing_file_through_python_dash_m(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "assignor", "plan", str(tmp_path / "absent.json")],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "cannot read" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("strategy", ["stateful", "faust"])
def test_same_answer_whatever_the_hash_seed(tmp_path: Path, strategy: str) -> None:
    """Rule 8 across processes: set iteration order must not leak into results."""
    scenario = REPO_ROOT / "tests" / "data" / "scenarios" / "shared" / "adclick-scale-out.json"
    outputs = []
    for seed in ("1", "2"):
        run = subprocess.run(
            [sys.executable, "-m", "assignor", "plan", str(scenario), "--strategy", strategy],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        )
        outputs.append(run.stdout)
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0])["strategy"] == strategy


def test_help_returns_instead_of_exiting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--help"]) == 0
    assert "--strategy" in capsys.readouterr().out
