"""A streamapp worker whose consumer group is already run by stock Faust workers refuses to
start with one message naming the cause and the way out, instead of aiokafka's fatal
InconsistentGroupProtocolError from inside the worker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from streamapp.group_check import find_foreign_group
from streamapp.kafka.probe import free_port
from streamapp.partition_assignor import PROTOCOL_NAME

from .apps.foreign_group import GROUP
from .workers import REPO_ROOT, WorkerProcess

APP = "tests.integration.apps.foreign_group"


def test_streamapp_worker_refuses_a_group_run_by_stock_faust(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    log_path = tmp_path / "stock.log"
    with log_path.open("wb") as log:
        stock = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faust",
                "-A",
                f"{APP}:stock",
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
            env={
                **os.environ,
                "BROKER_URL": f"kafka://{kafka_bootstrap}",
                "APP_DATADIR": str(tmp_path / "stock-data"),
            },
        )
    try:
        deadline = time.monotonic() + 90
        found = None
        while found is None:
            assert stock.poll() is None, log_path.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-3000:]
            time.sleep(1)
            found = asyncio.run(find_foreign_group(kafka_bootstrap, GROUP, PROTOCOL_NAME))
        assert (found.protocol, found.members) == ("faust", 1)

        ours = WorkerProcess(f"{APP}:ours", kafka_bootstrap, tmp_path / "ours").start()
        assert ours.process is not None
        status = ours.process.wait(timeout=60)
        log_text = ours.log_path.read_text(errors="replace")
        assert status == 2, log_text
        lines = [line for line in log_text.splitlines() if line.startswith("streamapp worker:")]
        assert len(lines) == 1, log_text
        assert f"consumer group {GROUP!r} is run by 1 stock Faust worker using" in lines[0]
        assert "Stop those workers first" in lines[0]
    finally:
        stock.kill()
        stock.wait()


def test_no_foreign_group_when_nobody_runs_it(kafka_bootstrap: str) -> None:
    assert asyncio.run(find_foreign_group(kafka_bootstrap, "it-nobody", PROTOCOL_NAME)) is None
