"""One ``streamapp worker`` subprocess, as tests, benchmarks and the demo run it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streamapp.kafka.probe import free_port

_CHECKOUT = Path(__file__).resolve().parents[2]
#: Where workers run: the source checkout streamapp is imported from (so that apps under its
#: ``examples`` and ``tests`` import), else the current directory (an installed streamapp).
REPO_ROOT = _CHECKOUT if (_CHECKOUT / "pyproject.toml").is_file() else Path.cwd()
#: What a web view can raise while the worker starts, rebalances or stops.
VIEW_ERRORS = (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError)


class WorkerProcess:
    """One ``streamapp worker`` subprocess with its own data dir, web port and log file.

    The log, ``<name>.log`` beside the data dir (``name`` defaults to the data dir's), is
    appended to across restarts, so a worker killed (SIGKILL: a crash, nothing flushed or
    committed) and started again on the same data dir keeps one history. The worker runs with
    the current Python (``python -m streamapp worker``) on a free web port; used as a context
    manager it is started on entry and stopped cleanly on exit.

    Args:
        app: The app, as ``MODULE:APP``.
        bootstrap: The broker's bootstrap address.
        data_dir: The worker's data dir (created if missing).
        *extra: More ``streamapp worker`` options.
        env: Environment variables added to this process's.
        name: The log's name (default: the data dir's).
    """

    def __init__(
        self,
        app: str,
        bootstrap: str,
        data_dir: Path,
        *extra: str,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        self.app = app
        self.bootstrap = bootstrap
        self.data_dir = data_dir
        self.extra = extra
        self.env = dict(env or {})
        self.name = name or data_dir.name
        self.web_port = free_port()
        self.log_path = data_dir.parent / f"{self.name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> WorkerProcess:
        """Start the worker process (again, after a stop or kill); returns ``self``."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **self.env,
            "PYTHONUNBUFFERED": "1",
            # Apps under `examples` and `tests` import from the checkout, not an install.
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        with self.log_path.open("ab") as log:
            if self.starts:  # a restart: the log goes on, marked (a first start's is the worker's)
                log.write(f"\n=== start {self.starts + 1} of {self.name} ===\n".encode())
                log.flush()
            self.process = subprocess.Popen(
                self.command(),
                cwd=REPO_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        self.starts += 1
        return self

    def command(self) -> list[str]:
        """The worker's command line: ``streamapp worker`` with this worker's options."""
        return [
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
        ]

    def alive(self) -> bool:
        """Whether the process runs."""
        return self.process is not None and self.process.poll() is None

    def get_json(self, path: str, timeout: float = 5.0) -> Any:
        """``GET path`` on the worker's web port, decoded from JSON.

        Raises:
            urllib.error.URLError: The worker does not answer (one of `VIEW_ERRORS`).
        """
        url = f"http://127.0.0.1:{self.web_port}{path}"
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read())

    def assignment(self) -> dict[str, Any] | None:
        """``GET /streamapp/assignment``, or None while the worker does not answer it."""
        try:
            view = self.get_json("/streamapp/assignment")
        except VIEW_ERRORS:
            return None
        return view if isinstance(view, dict) else None

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the worker's log (``"(no log)"`` when there is none)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def wait_for(self, path: str, predicate: Any, timeout: float = 120.0) -> Any:
        """Poll a web view every 0.5 s until ``predicate(json)`` holds, and return that JSON.

        Raises:
            AssertionError: The worker exited, or ``timeout`` seconds passed; the message
                holds the last answer and the tail of the worker's log.
        """
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
            except VIEW_ERRORS:
                pass
            time.sleep(0.5)
        raise AssertionError(
            f"{path} did not reach the expected state in {timeout:.0f} s; last: {last!r}\n"
            f"{self.log_tail()}"
        )

    def kill(self) -> None:
        """A crash: SIGKILL, nothing flushed or committed on the way out."""
        if self.process is not None and self.alive():
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def terminate(self) -> None:
        """Ask for a clean shutdown (SIGTERM) without waiting for it."""
        if self.process is not None and self.alive():
            self.process.send_signal(signal.SIGTERM)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Stop with ``sig`` (a clean shutdown by default), killing it after ``timeout``.

        Returns:
            The process's exit status.
        """
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
