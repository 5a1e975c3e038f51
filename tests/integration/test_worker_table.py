"""A real worker subprocess counts events into a rocksdict-backed changelog table, and keeps
the counts across a restart with the same data dir."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streamapp.testing.worker import WorkerProcess
from tables.identity import CLIENT_ID_FILE

from .apps.counter import PARTITIONS

APP = "tests.integration.apps.counter:app"
TOPIC = "it-counter-events"


async def _create_topic(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)]
        )
    finally:
        await admin.close()


async def _produce(bootstrap: str, keys: list[str]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key in keys:
            await producer.send(TOPIC, key=key.encode(), value=b"x")
        await producer.flush()
    finally:
        await producer.stop()


def test_counts_survive_restart(kafka_bootstrap: str, tmp_path: Path) -> None:
    first = [f"k{i % 7}" for i in range(70)] + ["k0"] * 5
    expected = Counter(first)
    data_dir = tmp_path / "worker-a"
    asyncio.run(_create_topic(kafka_bootstrap))
    with WorkerProcess(APP, kafka_bootstrap, data_dir) as worker:
        # The worker creates its topics; produce once it is up and has its partitions.
        worker.wait_for("/counts/", lambda counts: isinstance(counts, dict), timeout=180)
        asyncio.run(_produce(kafka_bootstrap, first))
        counts = worker.wait_for("/counts/", lambda c: sum(c.values()) >= len(first))
        assert counts == dict(expected)
        assert worker.stop() == 0, worker.log_tail()
    client_id = (data_dir / CLIENT_ID_FILE).read_text().strip()
    assert client_id.startswith("worker-")
    # Local rocksdict stores stay on disk after the worker stops.
    assert list(data_dir.rglob("*.db")), "no rocksdict store on disk"

    second = ["k1", "k1", "k-new"]
    expected.update(second)
    with WorkerProcess(APP, kafka_bootstrap, data_dir) as worker:
        restored = worker.wait_for("/counts/", lambda c: sum(c.values()) >= len(first), timeout=180)
        assert restored == {k: v for k, v in expected.items() if k != "k-new"} | {
            "k1": expected["k1"] - 2
        }
        asyncio.run(_produce(kafka_bootstrap, second))
        counts = worker.wait_for("/counts/", lambda c: sum(c.values()) >= sum(expected.values()))
        assert counts == dict(expected)
    assert (data_dir / CLIENT_ID_FILE).read_text().strip() == client_id
