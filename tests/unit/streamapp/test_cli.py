from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from examples.adclick.demo import build_parser as demo_parser
from examples.adclick.demo import processing_guarantee as demo_processing_guarantee
from streamapp.cli import build_parser
from streamapp.kafka.probe import free_port
from tests.paths import SHARED_SCENARIOS

SCENARIOS = SHARED_SCENARIOS


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


# -- every command's --help says what it does and what each option means --


def _help(*command: str) -> str:
    """The --help text of a `streamapp` command, with its line wrapping undone."""

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    return " ".join(out.getvalue().split())


def test_worker_help_describes_the_worker_and_every_option() -> None:
    text = _help("worker")
    assert "Run one worker process of a streamapp.App" in text
    assert "-l {debug,info,warning,error,critical}, --loglevel" in text
    assert "least severe log messages shown" in text
    # What happens without --web-port.
    assert "default: the app's web_port, Faust's 6066 unless the app sets one" in text
    for option in (
        "--num-standby-replicas N",
        "--acceptable-recovery-lag RECORDS",
        "--max-warmup-replicas N",
        "--probing-rebalance-interval-s SECONDS",
        "--dead-letter-topic TOPIC",
    ):
        assert option in text


def test_kafka_start_help_is_its_own() -> None:
    text = _help("kafka", "start")
    assert text.startswith("usage: streamapp kafka start [-h] [--port PORT] [--dir DIR]")
    assert "print its bootstrap address (127.0.0.1:PORT) as the last line" in text
    assert "--timeout TIMEOUT seconds to wait for the broker to answer (default: 90.0)" in text
    assert _help("kafka", "stop").startswith("usage: streamapp kafka stop [-h] [--port PORT]")
    assert (
        "--kafka-version VERSION the Apache Kafka release (default: $STREAMAPP_KAFKA_VERSION, "
        "else 4.4.0); tested: 4.4.0 and 3.9.1" in text
    )
    assert "--kafka-version VERSION" in _help("kafka", "fetch")


def test_kafka_refuses_a_release_it_cannot_run_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "streamapp", "kafka", "fetch", "--kafka-version", "2.8.1"],
        capture_output=True,
        text=True,
        check=False,
        env={"STREAMAPP_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "streamapp kafka fetch: --kafka-version=2.8.1: the local broker runs Kafka 3.3 to 4.x "
        "(KRaft, no ZooKeeper); tested: 4.4.0, 3.9.1"
    ]


def test_group_help_names_what_it_shows() -> None:
    text = _help("group")
    assert text.startswith("usage: streamapp group [-h] --broker BROKER [--format {table,json}]")
    assert "'leave CLIENT_ID' (that worker stops) or 'add N'" in text
    assert "default: table" in text


def test_plan_help_through_streamapp() -> None:
    result = _streamapp("plan", "--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: streamapp plan ")
    assert "docs/assignment-rules.md" in " ".join(result.stdout.split())


def test_demo_help_explains_and_shows_defaults() -> None:

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        demo_parser().parse_args(["--help"])
    text = " ".join(out.getvalue().split())
    assert "--seed SEED seed of the synthetic traffic" in text and "(default: 7)" in text
    assert "--workers WORKERS worker processes of the ad-click app (default: 3)" in text
    assert "--window-ms WINDOW_MS join window" in text and "(default: 10000)" in text
    assert "(default: None)" not in text


def test_the_demo_runs_exactly_once_unless_asked_for_at_least_once() -> None:
    for argv, expected in (
        ([], "exactly_once"),
        (["--exactly-once"], "exactly_once"),
        (["--at-least-once"], "at_least_once"),
    ):
        assert demo_processing_guarantee(demo_parser().parse_args(argv)) == expected
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        demo_parser().parse_args(["--exactly-once", "--at-least-once"])


def test_group_refusals_before_the_broker_are_one_line_and_exit_2() -> None:
    nobody = f"127.0.0.1:{free_port()}"
    for args, expected in (
        (
            ("--broker", nobody),
            f"streamapp group: --broker {nobody} is not reachable ({nobody}: connection refused",
        ),
        (
            ("--broker", nobody, "--max-warmup-replicas", "-1"),
            "streamapp group: --max-warmup-replicas -1: max_warmup_replicas must not be negative",
        ),
        (
            ("--broker", nobody, "--what-if", "leave"),
            "streamapp group: --what-if 'leave': expected 'leave CLIENT_ID' or 'add N'",
        ),
    ):
        result = _streamapp("group", "some-app", *args)
        assert result.returncode == 2, result.stderr
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(expected), result.stderr


def test_plan_into_a_pipe_closed_early_stops_without_a_traceback(tmp_path: Path) -> None:
    # Big enough that the JSON result outgrows the pipe's buffer, so the write after the reader
    # left really fails.
    scenario = {
        "topics": {"orders": 50_000},
        "members": {
            f"m{i}": {"client_id": f"worker-{i}", "subscription": ["orders"]} for i in range(4)
        },
    }
    path = tmp_path / "big.json"
    path.write_text(json.dumps(scenario))
    process = subprocess.Popen(
        [sys.executable, "-m", "streamapp", "plan", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().strip() == b"{"
    process.stdout.close()  # what `| head -1` does after its line
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert stderr == ""
