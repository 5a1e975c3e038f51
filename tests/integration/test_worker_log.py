"""A worker's log at INFO says what a person needs: ready, rebalanced (what moved), resumed.

Two real workers of one app: the second joins and leaves again, two ordinary rebalances.
Faust's banner, its service lifecycle lines, aiokafka's group chatter and its rebalance
WARNING are not at INFO (streamapp.quiet_logs); at ``-l debug`` they are all still there.

Under both protocols. An eager rebalance ends in Faust's ``Worker ready``; an incremental one
(cooperative) in streamapp's ``incremental rebalance done``, and under cooperative a member that
joins gets what another gives up one rebalance later (KIP-429), so the join is two plans.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

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


@dataclass(frozen=True)
class Protocol:
    name: str
    #: The line that ends a rebalance this worker handles (recovery done, processing resumed),
    #: but for the first, which under both is Faust's (``Worker ready``).
    ready: str
    #: Plans the first worker sees: alone, the second worker joining, alone again.
    plans: int


EAGER = Protocol("eager", "Worker ready", plans=3)
#: The join is two plans: the first worker gives up what the second gets in the next.
COOPERATIVE = Protocol("cooperative", "streamapp: incremental rebalance done", plans=4)


def _source_partitions(line: str, part: str) -> str:
    """``"2, 3"`` from ``... | moved out <changelog> 2, 3; <SOURCE> 2, 3 | ...``."""
    section = line.split(f"| {part} ")[1].split(" | ")[0].strip()
    found = [t for t in section.split("; ") if t.startswith(f"{SOURCE} ")]
    return found[0].removeprefix(f"{SOURCE} ") if found else ""


def _readies(log: str, protocol: Protocol) -> int:
    """Rebalances the worker has come out of: recovery done, processing resumed."""
    count = log.count("Worker ready")
    if protocol is COOPERATIVE:
        count += log.count(COOPERATIVE.ready)
    return count


def _wait_ready(worker: WorkerProcess, times: int, protocol: Protocol) -> None:
    """Until the worker's log says it is ready ``times`` times."""
    wait_for_workers(
        {worker.name: worker},
        f"{worker.name} ready {times} time(s)",
        lambda: _readies(worker.log_path.read_text(errors="replace"), protocol) >= times,
        timeout=180,
    )


@pytest.mark.parametrize("protocol", [EAGER, COOPERATIVE], ids=lambda p: p.name)
def test_a_rebalance_is_a_few_lines_and_debug_keeps_everything(
    kafka_bootstrap: str, tmp_path: Path, protocol: Protocol
) -> None:
    asyncio.run(create_topic(kafka_bootstrap, SOURCE, PARTITIONS))
    env = {"STREAMAPP_REBALANCE_PROTOCOL": protocol.name}
    quiet = WorkerProcess(APP, kafka_bootstrap, tmp_path / "quiet", env=env)
    chatty = WorkerProcess(APP, kafka_bootstrap, tmp_path / "chatty", "-l", "debug", env=env)
    with quiet:
        _wait_ready(quiet, 1, protocol)
        with chatty:
            _wait_ready(chatty, 1, protocol)
            _wait_ready(quiet, protocol.plans - 1, protocol)
            assert chatty.stop() == 0, chatty.log_tail()
        _wait_ready(quiet, protocol.plans, protocol)
        assert quiet.stop() == 0, quiet.log_tail()

    log = quiet.log_path.read_text(errors="replace")
    lines = log.splitlines()
    for text in GONE:
        assert text not in log.replace("[^Worker]: Starting...", ""), text
    assert not [ln for ln in lines if "[WARNING]" in ln or "[ERROR]" in ln], log
    # Ready after a handful of lines, not a screenful.
    ready = next(i for i, ln in enumerate(lines) if "Worker ready" in ln)
    assert ready < 10, log
    # The first line says what runs (the harness marks restarts only, not a first start).
    assert f"streamapp: worker of app {APP_ID} (faust " in lines[0], log
    # The plans: alone, with the second worker, alone again; each says what moved.
    rebalanced = [ln for ln in lines if "streamapp: rebalanced (plan generation" in ln]
    assert len(rebalanced) == protocol.plans, log
    # What went to the second worker, and came back when it left.
    given = _source_partitions(rebalanced[1], "moved out")
    assert given and given == _source_partitions(rebalanced[-1], "moved in"), rebalanced
    assert f"{APP_ID}-__assignor-__leader" not in "\n".join(rebalanced)
    resumed = [ln for ln in lines if "streamapp: processing resumed after" in ln]
    assert len(resumed) == protocol.plans, log
    # The first start is Faust's; each later rebalance ends in its protocol's line.
    assert len([ln for ln in lines if "Worker ready" in ln]) == (
        protocol.plans if protocol is EAGER else 1
    ), log
    incremental = [ln for ln in lines if "incremental rebalance" in ln]
    if protocol is EAGER:
        assert not incremental, log
    else:
        assert len([ln for ln in lines if COOPERATIVE.ready in ln]) == protocol.plans - 1, log
        # Its lines name partitions in one line: what went, by topic, in compact ranges.
        lost = [ln.split(", lost ")[1] for ln in incremental if ", lost " in ln]
        assert [part for part in lost if f"{SOURCE} " in part], log

    # The same records at -l debug: demoted, not dropped.
    debug = chatty.log_path.read_text(errors="replace")
    assert "[DEBUG] Setting newly assigned partitions" in debug
    assert "[DEBUG] [^--Producer]: Creating topic" in debug
    assert "streamapp: rebalanced (plan generation" in debug
