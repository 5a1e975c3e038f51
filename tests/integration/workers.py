"""Waiting on `streamapp worker` subprocesses (`streamapp.testing.worker`), and stock Faust ones."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from streamapp.kafka.probe import free_port
from streamapp.testing.worker import REPO_ROOT, WorkerProcess


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


def merged_table(
    workers: Iterable[WorkerProcess], path: str, field: str | None = None
) -> dict[str, int]:
    """A table's contents, merged from the view at ``path`` of every worker (its ``field``, if
    given), each serving the keys of its own active partitions. A key two workers serve fails
    the test: a partition active on two workers at once."""
    merged: dict[str, int] = {}
    for worker in workers:
        view = worker.get_json(path)
        part: dict[str, int] = view if field is None else view[field]
        assert not set(part) & set(merged), "a key is active on two workers"
        merged.update(part)
    return merged


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


class StockFaustWorkerProcess(WorkerProcess):
    """A worker of a plain `faust.App` as stock Faust runs it (``faust worker``), with the life
    of a `WorkerProcess`: its own data dir, web port and log, stopped, killed and restarted the
    same way. ``app`` is ``module:attribute``; the broker reaches Faust as ``BROKER_URL``."""

    def __init__(
        self,
        app: str,
        bootstrap: str,
        data_dir: Path,
        *extra: str,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(
            app,
            bootstrap,
            data_dir,
            *extra,
            env={**(env or {}), "BROKER_URL": f"kafka://{bootstrap}"},
            name=name,
        )

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "faust",
            "-A",
            self.app,
            "--datadir",
            str(self.data_dir),
            "worker",
            "-l",
            "info",
            "--web-port",
            str(self.web_port),
            "--web-host",
            "127.0.0.1",
            "--web-bind",
            "127.0.0.1",
            *self.extra,
        ]

    def recovered(self) -> bool:
        """Whether this run of the worker has finished the recovery of its latest assignment.

        Stock Faust has no view of that; its log says it: ``Worker ready`` once a recovery is
        over and the streams have been sought to their committed offsets. Until then, records
        it fetches may be processed and then fetched again from the committed offsets.
        """
        try:
            log = self.log_path.read_text(errors="replace")
        except OSError:
            return False
        run = log.rsplit(f"=== start {self.starts} of {self.name} ===", 1)[-1]
        assigned = run.rfind("Executing _on_partitions_assigned")
        return assigned >= 0 and run.rfind("Worker ready") > assigned
