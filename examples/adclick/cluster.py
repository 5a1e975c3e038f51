"""Worker processes of the ad-click app for the demo, its test and the benchmark.

Each worker is a real `streamapp worker` process with its own data dir, web
port and log file; it can be killed with SIGKILL (a crash: no clean shutdown,
no final commit) and restarted on the same data dir and client id.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from examples.adclick.topology import Topology

REPO_ROOT = Path(__file__).resolve().parents[2]
APP_SPEC = "examples.adclick.app:app"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Worker:
    name: str
    bootstrap: str
    topology: Topology
    data_dir: Path
    web_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.name}.log"

    def start(self) -> Worker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **self.topology.to_env(),
            "PYTHONUNBUFFERED": "1",
            # `examples` is imported from the source checkout, not installed.
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        with self.log_path.open("ab") as log:
            log.write(f"\n=== start {self.starts + 1} of {self.name} ===\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "streamapp",
                    "worker",
                    "-A",
                    APP_SPEC,
                    "--broker",
                    self.bootstrap,
                    "--web-port",
                    str(self.web_port),
                    "--data-dir",
                    str(self.data_dir),
                    "--client-id",
                    self.name,
                    "--loglevel",
                    "info",
                ],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """A crash: SIGKILL, nothing flushed or committed on the way out."""
        if self.process is not None and self.alive():
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is None or not self.alive():
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)

    def terminate(self) -> None:
        """Ask for a clean shutdown (SIGTERM) without waiting for it."""
        if self.process is not None and self.alive():
            self.process.send_signal(signal.SIGTERM)

    def get_json(self, path: str, timeout: float = 3.0) -> Any:
        url = f"http://127.0.0.1:{self.web_port}{path}"
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read())

    def assignment(self) -> dict[str, Any] | None:
        """``GET /streamapp/assignment``, or None while the worker does not answer it."""
        try:
            view = self.get_json("/streamapp/assignment")
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
            return None
        return view if isinstance(view, dict) else None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def active_partitions(views: list[dict[str, Any] | None], topic: str) -> set[int]:
    return {p for v in views if v for p in (v.get("active") or {}).get(topic, [])}


def wait_until_assigned(workers: list[Worker], topology: Topology, timeout: float) -> None:
    """Until every live worker answers, in one generation, and owns some of the join's partitions,
    and those partitions are all owned.

    A worker still joining the group answers too, with nothing assigned: the join's partitions
    are then all owned by the others, and a crash of that worker would test nothing.
    """
    deadline = time.monotonic() + timeout
    wanted = set(range(topology.partitions))
    each_owns_some = len(workers) <= topology.partitions
    while time.monotonic() < deadline:
        for w in workers:
            if not w.alive():
                raise RuntimeError(f"{w.name} exited while starting:\n{w.log_tail()}")
        views = [w.assignment() for w in workers]
        if (
            all(views)
            and len({v.get("generation") for v in views if v}) == 1
            and (
                not each_owns_some
                or all(active_partitions([v], topology.impressions) for v in views)
            )
            and active_partitions(views, topology.impressions) == wanted
        ):
            return
        time.sleep(0.5)
    raise TimeoutError(
        f"workers did not take all {topology.partitions} partitions within {timeout:.0f} s"
    )


def stop_all(workers: list[Worker], timeout: float = 30.0) -> None:
    """Clean shutdown of all workers at once: each one's shutdown takes seconds."""
    for w in workers:
        w.terminate()
    for w in workers:
        w.stop(timeout=timeout)
