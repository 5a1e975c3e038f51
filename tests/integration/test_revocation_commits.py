"""A revocation commits what the worker processed, so the next owner does not process it again.

Faust forgets the acked offsets of revoked partitions in its revocation handler and commits
nothing there: every record processed since the last periodic commit was processed again by
the partition's next owner. Under the eager protocol every rebalance revokes every partition, so
any rebalance (a worker joining, a stray member leaving) repeated up to a commit interval of
work; counts came out too high. The app here commits on a timer once an hour, so without the
revocation's commit the second worker's arrival would count every event twice.

Run under each protocol, given explicitly: eager (everything revoked, Faust's handler) and
cooperative (only the partitions that move are revoked, streamapp.runtime.rebalance).

The check ends on a marker record sent to each partition last: once every marker is counted,
each partition has been processed up to its end, so a count still exact then is final.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from streamapp.testing.kafka_io import create_topic, produce
from streamapp.testing.worker import WorkerProcess
from tests.integration.apps.revocation_counter import PARTITIONS

from .workers import merged_table, wait_for_workers

APP = "tests.integration.apps.revocation_counter:app"
KEYS = 20


def _produce(bootstrap: str, topic: str, start: int, count: int, expected: Counter[str]) -> None:
    seqs = range(start, start + count)
    expected.update(f"k{seq % KEYS}" for seq in seqs)
    asyncio.run(produce(bootstrap, topic, seqs, lambda seq: f"k{seq % KEYS}"))


async def _send_markers(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for partition in range(PARTITIONS):
            await producer.send(topic, b"end", key=f"end-{partition}".encode(), partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
def test_a_rebalance_repeats_no_processed_record(
    kafka_bootstrap: str, tmp_path: Path, protocol: str
) -> None:
    app_id = f"it-revocation-{protocol}"
    topic = f"{app_id}-events"
    asyncio.run(create_topic(kafka_bootstrap, topic, PARTITIONS))
    workers = {
        name: WorkerProcess(
            APP,
            kafka_bootstrap,
            tmp_path / name,
            "--client-id",
            name,
            "--rebalance-protocol",
            protocol,
            env={"REVOCATION_APP_ID": app_id},
        )
        for name in ("w1", "w2")
    }
    expected: Counter[str] = Counter()

    def actives(name: str) -> list[int]:
        view = workers[name].get_json("/streamapp/assignment")
        return sorted(view["active"].get(topic, []))

    def counts() -> dict[str, int]:
        started = [worker for worker in workers.values() if worker.process is not None]
        return merged_table(started, "/counts/")

    def counted_exactly() -> bool:
        held = sorted(p for n, w in workers.items() if w.process is not None for p in actives(n))
        return held == list(range(PARTITIONS)) and counts() == dict(expected)

    started = {name: workers[name] for name in ("w1",)}
    try:
        workers["w1"].start()
        wait_for_workers(
            started,
            "w1 holding every partition",
            lambda: actives("w1") == [0, 1, 2, 3],
            timeout=180,
        )
        _produce(kafka_bootstrap, topic, 0, 300, expected)
        wait_for_workers(started, "the first events counted", counted_exactly, timeout=120)

        # w2 joins: w1's partitions are revoked (all under eager, those that move under
        # cooperative), some move to w2, and both go on from the committed offsets. An
        # hour-long commit interval has committed nothing.
        workers["w2"].start()
        started["w2"] = workers["w2"]
        wait_for_workers(
            started,
            "both workers holding partitions",
            lambda: bool(actives("w1")) and bool(actives("w2")),
            timeout=180,
        )
        _produce(kafka_bootstrap, topic, 300, 100, expected)
        asyncio.run(_send_markers(kafka_bootstrap, topic))
        markers = {f"end-{partition}": 1 for partition in range(PARTITIONS)}
        expected.update(markers)
        wait_for_workers(
            started,
            "every partition processed up to its marker",
            lambda: all(counts().get(key) == 1 for key in markers),
            timeout=120,
            details=lambda: f"counts {counts()}",
        )
        assert counted_exactly(), f"counts {counts()}\nexpected {dict(expected)}"
    finally:
        for worker in workers.values():
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()
