"""Two cooperative rebalances that overlap, on a real broker: real `streamapp worker` processes
of tests/integration/apps/cooperative.py, scaled out from two workers to three while events
queue up in their streams.

A worker that gives partitions up rejoins at once, so the second rebalance begins while the
first one's restore is still under way. Here every restore waits a few seconds before it
starts (the app's recovery delay), so the next rebalance's steps run while it is pending, and
its gained partitions join it. Under Faust's own recovery the first pass then completed inside
the next rebalance's handlers, whose flow-control resume emptied the queues of the partitions
kept flowing: those records were never processed, and every later commit of their partitions
stopped at the first of them (the ad-click demo's worker-1 processed on and never committed
again).

Checked: the overlap was built (some rebalance's table step found the restore before it under
way, and that restore completed after it began), every offset was processed and the table is
exact, and the group's committed offsets reach the end of every partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from streamapp.testing.kafka_io import create_topic, partition_ends

from .cooperative_group import WorkerGroup, check_nothing_lost, read_log
from .workers import wait_for_workers

APP = "tests.integration.apps.cooperative:app"
APP_ID = "it-coop-overlap"
TOPIC = f"{APP_ID}-events"
PARTITIONS = 6
KEYS = 600


class Group(WorkerGroup):
    def __init__(self, bootstrap: str, root: Path) -> None:
        super().__init__(APP, bootstrap, root, TOPIC, _key)
        self.logs = root / "processing"
        self.logs.mkdir()

    def start(self, name: str) -> None:
        env = {
            "COOP_APP_ID": APP_ID,
            "COOP_LOG_DIR": str(self.logs),
            # The next rebalance must reach its table step while a pass still waits this long
            # (else the overlap is not built and the test fails, saying so): 6 s leaves room
            # for the rejoin (heartbeats every 1 s) on a busy machine, where 2 s left little.
            "COOP_RECOVERY_DELAY_S": "6",
            "COOP_EVENT_DELAY_S": "0.003",
            "COOP_HOLD_TABLE_STEP": "1",
        }
        self.start_worker(name, env=env)

    def settled(self) -> bool:
        return self.assignment_settled(self.workers, PARTITIONS) and self.table() == self.expected

    def all_committed(self) -> bool:
        return committed_offsets(self.bootstrap, APP_ID, TOPIC) == asyncio.run(
            partition_ends(self.bootstrap, TOPIC)
        )

    def wait(self, what: str, check: Any, timeout: float = 180.0) -> None:
        wait_for_workers(self.workers, what, check, timeout=timeout, log_lines=30)

    def log(self, name: str) -> list[dict[str, Any]]:
        return read_log(self.logs / f"{name}.jsonl")


def _key(seq: int) -> str:
    return f"k{seq % KEYS}"


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset of each partition of ``topic`` that has one."""

    async def read() -> dict[int, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            offsets = await admin.list_consumer_group_offsets(group)
        finally:
            await admin.close()
        return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}

    return asyncio.run(read())


@pytest.fixture(scope="module")
def group(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    with Group(kafka_bootstrap, tmp_path_factory.mktemp("overlap")) as group:
        for name in ("w1", "w2"):
            group.start(name)
        group.produce(1200)
        group.wait("two workers processing the first events", group.settled)
        yield group


def test_overlapping_rebalances_lose_no_record_and_commit_everything(group: Group) -> None:
    group.start("w3")
    group.produce(6000)  # queued in the streams while w3 joins (3 ms an event)
    group.wait("w3 to take its share, every event processed", group.settled)
    group.wait("every event committed", group.all_committed)

    # The overlap was built: a table step found the restore of the rebalance before it under
    # way, and that restore completed after the next rebalance began.
    logs = {name: group.log(name) for name in group.workers}
    overtaken = [
        name for name, entries in logs.items() if any(e["ev"] == "pass_over" for e in entries)
    ]
    assert overtaken, {
        name: [e["ev"] for e in entries if e["ev"] != "rec"] for name, entries in logs.items()
    }

    check_nothing_lost(group, logs.values())
