"""A streamapp worker whose consumer group is already run by stock Faust workers refuses to
start with one message naming the cause and the way out, instead of aiokafka's fatal
InconsistentGroupProtocolError from inside the worker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from streamapp.group_check import find_foreign_group
from streamapp.partition_assignor import PROTOCOL_NAME
from streamapp.testing.worker import WorkerProcess

from .apps.foreign_group import GROUP
from .workers import start_stock_faust_worker

APP = "tests.integration.apps.foreign_group"


def test_streamapp_worker_refuses_a_group_run_by_stock_faust(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    log_path = tmp_path / "stock.log"
    stock = start_stock_faust_worker(f"{APP}:stock", kafka_bootstrap, tmp_path / "stock", log_path)
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
