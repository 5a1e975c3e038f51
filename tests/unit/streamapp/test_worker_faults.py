"""`streamapp worker` refuses a bad option with one line and exit 2, before Faust starts.

Every test runs the real command line in a subprocess. None needs a Kafka broker: each
fault is found before the worker would contact one, and where a test needs the checks to
get past the broker, the broker given is a loopback port nobody listens on, so the
refusal it ends with proves the earlier checks passed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from faust.utils.urls import urllist

from streamapp.kafka.probe import free_port
from streamapp.preflight import WorkerSetupError, check_broker_reachable
from tables.identity import CLIENT_ID_FILE
from tests.paths import REPO_ROOT

_APP = """
from streamapp import App

app = App("fault-test", topic_partitions=1)
"""

_LOCK_HOLDER = """
import sys, time
from tables.data_dir_lock import lock_data_dir
lock = lock_data_dir(sys.argv[1])
print("locked", flush=True)
time.sleep(600)
"""


def _free_port() -> int:
    """A loopback port nobody listens on."""
    return free_port("127.0.0.1")


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "app"
    directory.mkdir()
    (directory / "fault_test_app.py").write_text(_APP)
    return directory


def _worker(
    app_dir: Path, *options: str, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    if "--web-port" not in options:
        # Not the app's default (6066): a worker of another test run may hold that one.
        options = (*options, "--web-port", str(_free_port()))
    # Faust reads these from the environment; the caller's must not leak into the test.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"BROKER_URL", "APP_DATADIR", "WEB_PORT", "WEB_BIND", "WEB_HOST"}
        and not k.startswith("STREAMAPP_")
    }
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "streamapp", "worker", "-A", "fault_test_app:app", *options],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused start prints; fails unless that is all it did."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), result.stderr
    assert lines[0].startswith("streamapp worker: ")
    return lines[0]


@pytest.fixture
def no_broker() -> str:
    return f"127.0.0.1:{_free_port()}"


@pytest.mark.parametrize("capacity", ["0", "-3"])
def test_capacity_below_one(app_dir: Path, tmp_path: Path, capacity: str) -> None:
    line = _refusal(_worker(app_dir, "--capacity", capacity, "--data-dir", str(tmp_path / "d")))
    assert line == (
        f"streamapp worker: --capacity {capacity} must be at least 1 "
        "(it is this worker's relative share of work)"
    )
    assert not (tmp_path / "d").exists()  # refused before anything was touched


def test_capacity_that_is_not_a_number(app_dir: Path) -> None:
    line = _refusal(_worker(app_dir, "--capacity", "lots"))
    assert "argument --capacity: invalid int value: 'lots'" in line


def test_a_setting_option_out_of_range_is_named(app_dir: Path, tmp_path: Path) -> None:
    line = _refusal(
        _worker(app_dir, "--max-warmup-replicas", "-1", "--data-dir", str(tmp_path / "d"))
    )
    assert line == (
        "streamapp worker: --max-warmup-replicas -1: max_warmup_replicas must not be negative, "
        "got -1"
    )
    assert not (tmp_path / "d").exists()


def test_a_setting_variable_out_of_range_is_named(
    app_dir: Path, tmp_path: Path, no_broker: str
) -> None:
    result = _worker(
        app_dir,
        "--broker",
        no_broker,
        "--data-dir",
        str(tmp_path / "d"),
        env_extra={"STREAMAPP_PROBING_REBALANCE_INTERVAL_S": "0"},
    )
    assert _refusal(result) == (
        "streamapp worker: -A 'fault_test_app:app': STREAMAPP_PROBING_REBALANCE_INTERVAL_S='0': "
        "probing_rebalance_interval_s must be positive, got 0.0"
    )


def test_web_port_out_of_range(app_dir: Path, tmp_path: Path) -> None:
    line = _refusal(_worker(app_dir, "--web-port", "70000", "--data-dir", str(tmp_path / "d")))
    assert line == "streamapp worker: --web-port 70000 is not a TCP port (1-65535)"


def test_data_dir_that_cannot_be_created(app_dir: Path, tmp_path: Path, no_broker: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    data_dir = blocker / "data"
    line = _refusal(_worker(app_dir, "--data-dir", str(data_dir), "--broker", no_broker))
    assert line.startswith(f"streamapp worker: --data-dir {data_dir} cannot be created: ")
    assert "Not a directory" in line


def test_data_dir_that_is_a_file(app_dir: Path, tmp_path: Path, no_broker: str) -> None:
    data_dir = tmp_path / "a-file"
    data_dir.write_text("")
    line = _refusal(_worker(app_dir, "--data-dir", str(data_dir), "--broker", no_broker))
    assert line == (
        f"streamapp worker: --data-dir {data_dir} is not a directory; "
        "give a directory for local state"
    )


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory this process cannot write in: by mode, or (for root) immutable."""
    directory = tmp_path / "read-only"
    directory.mkdir()
    if os.geteuid() != 0:
        directory.chmod(0o555)
        yield directory
        directory.chmod(0o755)
        return
    # Root ignores permission bits; the immutable attribute stops it (ext4, xfs, btrfs).
    made = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip("cannot make a directory read-only for root here (no chattr +i)")
    try:
        yield directory
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


def test_data_dir_that_is_not_writable(app_dir: Path, read_only_dir: Path, no_broker: str) -> None:
    line = _refusal(_worker(app_dir, "--data-dir", str(read_only_dir), "--broker", no_broker))
    assert line.startswith(f"streamapp worker: --data-dir {read_only_dir} is not writable: ")
    assert line.endswith("; give a directory this user can write")


def test_missing_data_dir_is_created(app_dir: Path, tmp_path: Path, no_broker: str) -> None:
    data_dir = tmp_path / "not" / "yet" / "there"
    line = _refusal(_worker(app_dir, "--data-dir", str(data_dir), "--broker", no_broker))
    assert "--broker" in line  # refused on the broker: the data dir passed
    assert (data_dir / CLIENT_ID_FILE).is_file()
    assert not [p for p in data_dir.iterdir() if p.name.startswith(".streamapp-write-probe")]


def test_web_port_in_use(app_dir: Path, tmp_path: Path, no_broker: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _worker(
            app_dir,
            "--web-port",
            str(port),
            "--data-dir",
            str(tmp_path / "d"),
            "--broker",
            no_broker,
        )
    assert _refusal(result) == (
        f"streamapp worker: --web-port {port} is in use by another process; pick a free port"
    )


def test_broker_nobody_listens_on_names_every_address(app_dir: Path, tmp_path: Path) -> None:
    first, second = _free_port(), _free_port()
    brokers = f"127.0.0.1:{first},127.0.0.1:{second}"
    result = _worker(app_dir, "--broker", brokers, "--data-dir", str(tmp_path / "d"))
    line = _refusal(result)
    assert line.startswith(
        f"streamapp worker: --broker 127.0.0.1:{first},127.0.0.1:{second} is not reachable ("
    )
    assert f"127.0.0.1:{first}: connection refused" in line
    assert f"127.0.0.1:{second}: connection refused" in line


def test_one_live_bootstrap_address_is_enough() -> None:
    """A dead first address must not refuse a broker list whose second address answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        live = listener.getsockname()[1]
        dead = _free_port()
        urls = urllist(f"127.0.0.1:{dead},127.0.0.1:{live}", default_scheme="kafka")
        check_broker_reachable(urls, "--broker")  # returns: one address answered
        with pytest.raises(WorkerSetupError, match=f"127.0.0.1:{dead}: connection refused"):
            check_broker_reachable(urls[:1], "--broker")


def test_second_worker_on_the_same_data_dir(app_dir: Path, tmp_path: Path, no_broker: str) -> None:
    data_dir = tmp_path / "shared"
    data_dir.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", _LOCK_HOLDER, str(data_dir)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        line = _refusal(_worker(app_dir, "--data-dir", str(data_dir), "--broker", no_broker))
        assert line == (
            f"streamapp worker: data dir {data_dir} is in use by pid {holder.pid} "
            "(another worker); give each worker its own --data-dir"
        )
        # Refused before touching the data dir: no client id was created in it.
        assert not (data_dir / CLIENT_ID_FILE).exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The holder died without cleaning up: the next worker gets past the lock.
    line = _refusal(_worker(app_dir, "--data-dir", str(data_dir), "--broker", no_broker))
    assert line.startswith(f"streamapp worker: --broker {no_broker} is not reachable")
