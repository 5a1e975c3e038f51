"""`streamapp demo` stopped mid-run leaves no process behind.

The demo runs as a subprocess with its own broker (the Kafka JVM, in a session of its own) and two
workers. Once traffic flows (the generator's first progress line: every worker owns partitions),
it is stopped the two ways people stop it: SIGTERM to its pid (`kill`, a supervisor), and SIGINT
to its process group (Ctrl-C in a terminal, which reaches the workers too); and it fails, a
worker dying under it. Every process seen under it (walking /proc from its pid while it runs)
must be gone once it exits, and one line must say what it stopped, by pid, and where the logs are.
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


class _Demo:
    """`streamapp demo` as a subprocess in a process group of its own (as a shell starts a
    command), with every process seen under it while it ran."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.log = tmp_path / "demo.err"
        self.data_dir = tmp_path / "demo"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p
            ),
        }
        command = [sys.executable, "-m", "streamapp", "demo", "--workers", str(WORKERS)]
        command += ["--partitions", "4", "--data-dir", str(self.data_dir)]
        command += ["--report-dir", str(tmp_path / "report"), *args]
        with self.log.open("wb") as err:
            self.process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        self.seen: dict[int, str] = {}  # pid -> start time, of every process seen under it
        self.commands: dict[int, str] = {}

    def look(self) -> None:
        for pid, started in _descendants(self.process.pid).items():
            if pid not in self.seen:
                self.seen[pid], self.commands[pid] = started, _cmdline(pid)

    def pids_of(self, text: str) -> set[int]:
        return {pid for pid, cmd in self.commands.items() if text in cmd}

    def wait(self, timeout: float) -> int:
        """Until it exits, looking for new children (a restarted worker) on the way."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            assert time.monotonic() < deadline, f"the demo still runs:\n{self.log.read_text()}"
            self.look()
            time.sleep(0.5)
        return self.process.returncode

    def survivors(self) -> dict[int, str]:
        return {pid: self.commands[pid] for pid, t in self.seen.items() if _running(pid, t)}

    def stopped_line(self, cause: str) -> re.Match[str]:
        """The line that says what it stopped; it must name this log's data dir."""
        pattern = (
            rf"demo: stopped {cause}: {WORKERS} workers \(pids ([\d, ]+)\) and the Kafka "
            rf"[\d.]+ broker \(pid (\d+)\); logs and data in (.+)"
        )
        lines = self.log.read_text().splitlines()
        found = [m for line in lines if (m := re.fullmatch(pattern, line))]
        assert len(found) == 1, "\n".join(lines[-20:])
        assert Path(found[0][3]) == self.data_dir
        return found[0]

    def kill_all(self) -> None:
        """Whatever the outcome, nothing the test started outlives it."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid, started in self.seen.items():
            if _running(pid, started):
                os.kill(pid, signal.SIGKILL)


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
    # Slow traffic and a late crash: the signal comes long before the demo's own worker kill.
    demo = _Demo(tmp_path, "--events", "100000", "--rate", "200", "--kill-at", "0.9")
    try:
        _wait_for_line(demo.log, demo.process, "demo: generator: ", timeout=420)
        demo.look()
        workers, brokers = demo.pids_of("streamapp worker"), demo.pids_of("kafka.Kafka")
        assert len(workers) == WORKERS and len(brokers) == 1, demo.commands

        if to_group:
            os.killpg(demo.process.pid, sig)
        else:
            demo.process.send_signal(sig)
        status = demo.wait(timeout=300)

        assert demo.survivors() == {}
        assert status == 128 + sig
        said = demo.stopped_line(f"on {sig.name}")
        # The last line, with the pids of the workers and of the broker's JVM.
        assert demo.log.read_text().strip().splitlines()[-1] == said[0]
        assert {int(p) for p in said[1].split(", ")} == workers
        assert {int(said[2])} == brokers
        assert (demo.data_dir / "kafka" / "broker.log").is_file()
    finally:
        demo.kill_all()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_demo_that_fails_stops_its_broker_and_workers(tmp_path: Path) -> None:
    # A worker dies while the demo waits for the group to form: the demo fails on it.
    demo = _Demo(tmp_path)
    try:
        _wait_for_line(demo.log, demo.process, "demo: started ", timeout=420)
        demo.look()
        workers, brokers = demo.pids_of("streamapp worker"), demo.pids_of("kafka.Kafka")
        assert len(workers) == WORKERS and len(brokers) == 1, demo.commands
        (first,) = demo.pids_of("--client-id worker-1")
        os.kill(first, signal.SIGKILL)
        status = demo.wait(timeout=300)

        assert demo.survivors() == {}
        assert status == 1
        said = demo.stopped_line("after an error")
        assert {int(p) for p in said[1].split(", ")} == workers
        assert {int(said[2])} == brokers
        assert "demo: failed: worker-1 exited while starting" in demo.log.read_text()
    finally:
        demo.kill_all()
