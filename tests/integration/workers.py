"""Run `streamapp worker` subprocesses for integration tests and read their web views."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from streamapp.kafka.probe import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """One `streamapp worker` subprocess with its own data dir, web port and log file."""

    def __init__(self, app: str, bootstrap: str, data_dir: Path, *extra: str) -> None:
        self.app = app
        self.bootstrap = bootstrap
        self.data_dir = data_dir
        self.extra = extra
        self.web_port = free_port()
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamapp",
                "worker",
                "-A",
                self.app,
                "--broker",
                self.bootstrap,
                "--data-dir",
                str(self.data_dir),
                "--web-port",
                str(self.web_port),
                *self.extra,
            ],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()
        return self

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}{path}", timeout=5) as resp:
            return json.loads(resp.read())

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def wait_for(self, path: str, predicate: Any, timeout: float = 120.0) -> Any:
        """Poll a web view until ``predicate(json)`` holds; fail with the worker's log if not."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(
                    f"worker exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                last = self.get_json(path)
                if predicate(last):
                    return last
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass
            time.sleep(0.5)
        raise AssertionError(
            f"{path} did not reach the expected state in {timeout:.0f} s; last: {last!r}\n"
            f"{self.log_tail()}"
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.stop()


def wait_for_workers(
    workers: Mapping[str, WorkerProcess],
    what: str,
    check: Callable[[], bool],
    *,
    timeout: float,
    details: Callable[[], str] = lambda: "",
    log_lines: int = 20,
) -> None:
    """Poll ``check`` until it holds, failing at once if a worker exits, with their logs if not.

    A web view that is not up yet (``OSError``) counts as the check not holding yet.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, worker in workers.items():
            assert worker.process is not None
            if worker.process.poll() is not None:
                raise AssertionError(f"{name} exited:\n{worker.log_tail()}")
        try:
            if check():
                return
        except OSError:
            pass  # a web view not up yet
        time.sleep(0.5)
    logs = "\n".join(f"--- {n}\n{w.log_tail(log_lines)}" for n, w in workers.items())
    raise AssertionError(f"timed out waiting for {what}\n{details()}\n{logs}")


def start_stock_faust_worker(
    app: str, bootstrap: str, data_dir: Path, log_path: Path
) -> subprocess.Popen[bytes]:
    """A worker of a plain `faust.App` (stock Faust's own assignor), as `faust worker` runs it."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faust",
                "-A",
                app,
                "worker",
                "-l",
                "info",
                "--web-port",
                str(free_port()),
                "--web-host",
                "127.0.0.1",
            ],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "BROKER_URL": f"kafka://{bootstrap}", "APP_DATADIR": str(data_dir)},
        )
