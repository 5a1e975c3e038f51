"""`streamapp demo` stopped mid-run leaves no process behind.

The demo runs as a subprocess with its own broker (the Kafka JVM, in a session of its own) and two
workers. Once traffic flows (the generator's first progress line: every worker owns partitions),
it is stopped the two ways people stop it: SIGTERM to its pid (`kill`, a supervisor), and SIGINT
to its process group (Ctrl-C in a terminal, which reaches the workers too). Every process it had
started, found by walking /proc from its pid before the signal, must be gone once it exits, and
its last line must say what it stopped, by pid, and where the logs are.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKERS = 2


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (state first), or None when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _start_time(pid: int) -> str | None:
    fields = _stat(pid)
    return fields[19] if fields else None  # field 22 of stat: start time, in clock ticks


def _running(pid: int, started: str) -> bool:
    """The same process (pid and start time: pids get reused) exists and is not a zombie."""
    fields = _stat(pid)
    return fields is not None and fields[19] == started and fields[0] != "Z"


def _descendants(root: int) -> dict[int, str]:
    """Every process under ``root``, as pid -> start time."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = list(parents.get(root, []))
    while todo:
        pid = todo.pop()
        if (started := _start_time(pid)) is not None:
            found[pid] = started
            todo.extend(parents.get(pid, []))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _wait_for_line(log: Path, demo: subprocess.Popen[bytes], text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if demo.poll() is not None:
            raise AssertionError(f"the demo exited with {demo.returncode}:\n{log.read_text()}")
        time.sleep(0.5)
    raise AssertionError(f"no {text!r} from the demo in {timeout:.0f} s:\n{log.read_text()}")


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("sig", "to_group"),
    [(signal.SIGTERM, False), (signal.SIGINT, True)],
    ids=["sigterm-to-the-demo", "ctrl-c-to-its-group"],
)
def test_a_stopped_demo_stops_its_broker_and_workers(
    tmp_path: Path, sig: signal.Signals, to_group: bool
) -> None:
    log = tmp_path / "demo.err"
    data_dir = tmp_path / "demo"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p
        ),
    }
    # Slow traffic and a late crash: the signal comes long before the demo's own worker kill.
    args = ["--workers", str(WORKERS), "--partitions", "4", "--events", "100000", "--rate", "200"]
    args += ["--kill-at", "0.9", "--data-dir", str(data_dir), "--report-dir", str(tmp_path / "r")]
    with log.open("wb") as err:
        demo = subprocess.Popen(
            [sys.executable, "-m", "streamapp", "demo", *args],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # its own process group, as a shell gives a command
        )
    children: dict[int, str] = {}
    try:
        _wait_for_line(log, demo, "demo: generator: ", timeout=420)
        children = _descendants(demo.pid)
        commands = {pid: _cmdline(pid) for pid in children}
        workers = {pid for pid, cmd in commands.items() if "streamapp worker" in cmd}
        brokers = {pid for pid, cmd in commands.items() if "kafka.Kafka" in cmd}
        assert len(workers) == WORKERS and len(brokers) == 1, commands

        if to_group:
            os.killpg(demo.pid, sig)
        else:
            demo.send_signal(sig)
        status = demo.wait(timeout=300)

        survivors = {pid: commands[pid] for pid, t in children.items() if _running(pid, t)}
        assert survivors == {}
        assert status == 128 + sig
        last = log.read_text().strip().splitlines()[-1]
        said = re.fullmatch(
            rf"demo: stopped on {sig.name}: {WORKERS} workers \(pids ([\d, ]+)\) and the Kafka "
            rf"[\d.]+ broker \(pid (\d+)\); logs and data in (.+)",
            last,
        )
        assert said, last
        assert {int(p) for p in said[1].split(", ")} == workers
        assert {int(said[2])} == brokers
        assert Path(said[3]) == data_dir
        assert (data_dir / "kafka" / "broker.log").is_file()
    finally:
        # Whatever the outcome, nothing this test started outlives it.
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        for pid, started in children.items():
            if _running(pid, started):
                os.kill(pid, signal.SIGKILL)
