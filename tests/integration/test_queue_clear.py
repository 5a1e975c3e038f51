"""A queue cleared while the flow runs on loses nothing (streamapp.runtime.flow), on a real
broker: a real `streamapp worker` of tests/integration/apps/queue_clear.py, under the cooperative
protocol, whose agent empties its own queue once as it processes an early record.

Nothing seeks a partition that keeps flowing (under the cooperative protocol, one kept through
a rebalance), so without the hand-out ledger the records dropped there were never processed, and the
partition's commits stopped at the first of them for good (the cooperative demo's worker-1).

Checked: the clear dropped records (the premise), every offset was processed exactly once (a
single worker, no restart: the ledger hands the dropped records out once more and nothing
twice), the worker said where it went back to, and the committed offset reaches the end.

The same under a cooperative scale-out (tests/integration/apps/cooperative.py), each worker
emptying its queues as each rebalance assigns it partitions it kept: nothing lost, the
latest-value table exact, every offset committed, and the partitions kept processed in offset
order, each record once.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from streamapp.testing.kafka_io import create_topic, partition_ends
from streamapp.testing.worker import WorkerProcess

from .apps.queue_clear import APP_ID, CLEAR_AT, QUEUED, TOPIC
from .cooperative_group import WorkerGroup, check_nothing_lost, read_log
from .test_cooperative_overlap import committed_offsets
from .workers import wait_for_workers

APP = "tests.integration.apps.queue_clear:app"
RECORDS = 3000


async def _produce(bootstrap: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send(TOPIC, key=f"k{i}".encode(), value=b"x", partition=0)
        await producer.flush()
    finally:
        await producer.stop()


def test_records_dropped_from_a_kept_partitions_queue_are_processed(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, 1))
    asyncio.run(_produce(kafka_bootstrap))
    with WorkerProcess(
        APP, kafka_bootstrap, tmp_path / "w1", "--rebalance-protocol", "cooperative"
    ) as worker:
        workers = {"w1": worker}
        view: dict[str, Any] = {}

        def all_seen() -> bool:
            view.update(worker.get_json("/seen/"))
            return len(view["seen"]) == RECORDS

        wait_for_workers(
            workers, "every offset processed", all_seen, timeout=180, details=lambda: str(view)
        )
        ends = asyncio.run(partition_ends(kafka_bootstrap, TOPIC))
        assert ends == {0: RECORDS}
        wait_for_workers(
            workers,
            "every offset committed",
            lambda: committed_offsets(kafka_bootstrap, APP_ID, TOPIC) == ends,
            timeout=60,
            details=lambda: str(committed_offsets(kafka_bootstrap, APP_ID, TOPIC)),
        )
        assert view["dropped"] >= QUEUED  # the clear dropped records queued behind CLEAR_AT
        assert view["seen"] == {str(offset): 1 for offset in range(RECORDS)}
        assert worker.stop() == 0, worker.log_tail()
    log = worker.log_path.read_text()
    # The agent's stream took a run of records (CLEAR_AT among them) off the queue before the
    # clear: the first record dropped is the one after that run's last.
    found = re.search(
        rf"{re.escape(TOPIC)}\[0\]: (\d+) record\(s\) dropped from a stream queue "
        r"unprocessed; the partition goes back to (\d+) to process them",
        log,
    )
    assert found is not None, worker.log_tail()
    assert int(found[1]) == view["dropped"]
    assert int(found[2]) > CLEAR_AT


COOP_APP = "tests.integration.apps.cooperative:app"
COOP_APP_ID = "it-queue-clear-coop"
COOP_TOPIC = f"{COOP_APP_ID}-events"
COOP_PARTITIONS = 6


def test_queues_cleared_in_a_cooperative_rebalance_lose_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A scale-out from two workers to three under the cooperative protocol, the workers of
    tests/integration/apps/cooperative.py emptying their queues as each rebalance assigns them
    partitions they kept (``COOP_CLEAR_KEPT_QUEUES``), while events queue up (3 ms each)."""
    asyncio.run(create_topic(kafka_bootstrap, COOP_TOPIC, COOP_PARTITIONS))
    logs = tmp_path / "processing"
    logs.mkdir()
    env = {
        "COOP_APP_ID": COOP_APP_ID,
        "COOP_LOG_DIR": str(logs),
        "COOP_EVENT_DELAY_S": "0.003",
        "COOP_CLEAR_KEPT_QUEUES": "1",
    }
    with WorkerGroup(COOP_APP, kafka_bootstrap, tmp_path, COOP_TOPIC, lambda s: f"k{s % 600}") as g:

        def settled() -> bool:
            return g.assignment_settled(g.workers, COOP_PARTITIONS) and g.table() == g.expected

        for name in ("w1", "w2"):
            g.start_worker(name, env=env)
        g.produce(1200)
        wait_for_workers(g.workers, "two workers processing", settled, timeout=180)
        marks = {name: len(read_log(logs / f"{name}.jsonl")) for name in g.workers}
        g.start_worker("w3", env=env)
        g.produce(6000)  # queued in the streams while w3 joins
        wait_for_workers(g.workers, "w3 in, every event processed", settled, timeout=240)
        ends = asyncio.run(partition_ends(kafka_bootstrap, COOP_TOPIC))
        wait_for_workers(
            g.workers,
            "every event committed",
            lambda: committed_offsets(kafka_bootstrap, COOP_APP_ID, COOP_TOPIC) == ends,
            timeout=60,
            details=lambda: str(committed_offsets(kafka_bootstrap, COOP_APP_ID, COOP_TOPIC)),
        )
        entries = {name: read_log(logs / f"{name}.jsonl") for name in g.workers}
        check_nothing_lost(g, entries.values())
        # The premise: a worker that kept partitions through w3's join had records queued
        # when it emptied its queues, and the fetch loop handed those records out again.
        cleared = [
            e for name in marks for e in entries[name][marks[name] :] if e["ev"] == "cleared"
        ]
        assert any(e["queued"] for e in cleared), cleared
        said = [
            name
            for name in marks
            if "dropped from a stream queue unprocessed" in g.workers[name].log_path.read_text()
        ]
        assert said, cleared
        # Since w3 started, w1 and w2 only kept or lost partitions: none of their records was
        # handed out twice (the ledger let each dropped record out once more, nothing else),
        # and each partition's records were processed in offset order.
        for name in marks:
            recs = [(e["p"], e["o"]) for e in entries[name][marks[name] :] if e["ev"] == "rec"]
            assert len(recs) == len(set(recs)), name
            for p in {p for p, _ in recs}:
                offsets = [o for q, o in recs if q == p]
                assert offsets == sorted(offsets), (name, p)
