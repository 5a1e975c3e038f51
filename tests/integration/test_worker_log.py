"""A worker's log at INFO says what a person needs: ready, rebalanced (what moved), resumed.

Two real workers of one app: the second joins and leaves again, two ordinary rebalances.
Faust's banner, its service lifecycle lines, aiokafka's group chatter and its rebalance
WARNING are not at INFO (streamapp.quiet_logs); at ``-l debug`` they are all still there.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from streamapp.testing.kafka_io import create_topic
from streamapp.testing.worker import WorkerProcess

from .apps.quiet_counter import APP_ID, PARTITIONS
from .workers import wait_for_workers

APP = "tests.integration.apps.quiet_counter:app"
SOURCE = f"{APP_ID}-events"

#: What the log at INFO does not say any more (each was there before, in every start).
GONE = [
    "ƒaµS†",  # the banner table
    "AlreadyConfiguredWarning",
    "Topic Partition Set",
    "Subscribed to topic",
    "Joined group",
    "Heartbeat failed for group",
    "IllegalStateError",
    "Highwater for",
    "]: Starting...",  # but "[^Worker]: Starting..."
]


def _source_partitions(line: str, part: str) -> str:
    """``"2, 3"`` from ``... | moved out <changelog> 2, 3; <SOURCE> 2, 3 | ...``."""
    section = line.split(f"| {part} ")[1].split(" | ")[0].strip()
    found = [t for t in section.split("; ") if t.startswith(f"{SOURCE} ")]
    return found[0].removeprefix(f"{SOURCE} ") if found else ""


def _wait_ready(worker: WorkerProcess, times: int) -> None:
    """Until the worker's log says "Worker ready" ``times`` times: recovery done, resumed."""
    wait_for_workers(
        {worker.name: worker},
        f"{worker.name} ready {times} time(s)",
        lambda: worker.log_path.read_text(errors="replace").count("Worker ready") >= times,
        timeout=180,
    )


def test_a_rebalance_is_a_few_lines_and_debug_keeps_everything(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    asyncio.run(create_topic(kafka_bootstrap, SOURCE, PARTITIONS))
    quiet = WorkerProcess(APP, kafka_bootstrap, tmp_path / "quiet")
    chatty = WorkerProcess(APP, kafka_bootstrap, tmp_path / "chatty", "-l", "debug")
    with quiet:
        _wait_ready(quiet, 1)
        with chatty:
            _wait_ready(chatty, 1)
            _wait_ready(quiet, 2)
            assert chatty.stop() == 0, chatty.log_tail()
        _wait_ready(quiet, 3)
        assert quiet.stop() == 0, quiet.log_tail()

    log = quiet.log_path.read_text(errors="replace")
    lines = log.splitlines()
    for text in GONE:
        assert text not in log.replace("[^Worker]: Starting...", ""), text
    assert not [ln for ln in lines if "[WARNING]" in ln or "[ERROR]" in ln], log
    # Ready after a handful of lines, not a screenful.
    ready = next(i for i, ln in enumerate(lines) if "Worker ready" in ln)
    assert ready < 10, log
    assert f"streamapp: worker of app {APP_ID} (faust " in lines[1]  # after the start marker
    # Three plans: alone, with the second worker, alone again; each says what moved.
    rebalanced = [ln for ln in lines if "streamapp: rebalanced (plan generation" in ln]
    assert len(rebalanced) == 3, log
    # What went to the second worker, and came back when it left.
    given = _source_partitions(rebalanced[1], "moved out")
    assert given and given == _source_partitions(rebalanced[2], "moved in"), rebalanced
    assert f"{APP_ID}-__assignor-__leader" not in "\n".join(rebalanced)
    assert len([ln for ln in lines if "streamapp: processing resumed after" in ln]) == 3
    assert len([ln for ln in lines if "Worker ready" in ln]) == 3

    # The same records at -l debug: demoted, not dropped.
    debug = chatty.log_path.read_text(errors="replace")
    assert "[DEBUG] Setting newly assigned partitions" in debug
    assert "[DEBUG] [^---Recovery]: Highwater for" in debug
    assert "streamapp: rebalanced (plan generation" in debug
