"""Damaged local state on a real broker: the worker keeps running, sets the store aside with one
warning, and the table is restored exactly from its changelog."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

from streamapp.testing.kafka_io import create_topic
from streamapp.testing.worker import WorkerProcess
from tables.damaged import DAMAGED_DIR

from .apps.damaged_state import APP_ID_ENV, PARTITIONS, TABLE, changelog_topic, source_topic

APP = "tests.integration.apps.damaged_state:app"


async def _produce(
    bootstrap: str, topic: str, records: list[tuple[str, bytes, int | None]]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value, partition in records:
            await producer.send(topic, key=key.encode(), value=value, partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


async def _recreate_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete ``topic`` and create it again, empty, as an operator would."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
        deadline = time.monotonic() + 60
        while True:
            try:
                # The broker refuses while the old topic is still being deleted.
                await admin.create_topics(
                    [NewTopic(topic, partitions, 1, topic_configs={"cleanup.policy": "compact"})]
                )
                return
            except KafkaError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
    finally:
        await admin.close()


def _store(data_dir: Path, partition: int) -> Path:
    [path] = data_dir.rglob(f"{TABLE}-{partition}.db")
    return path


def _warnings(worker: WorkerProcess, needle: str) -> list[str]:
    return [line for line in worker.log_path.read_text().splitlines() if needle in line]


def _run_and_fill(bootstrap: str, data_dir: Path, app_id: str, keys: list[str]) -> dict[str, int]:
    asyncio.run(create_topic(bootstrap, source_topic(app_id), PARTITIONS))
    with WorkerProcess(APP, bootstrap, data_dir) as worker:
        worker.wait_for("/counts/", lambda c: isinstance(c, dict), timeout=180)
        asyncio.run(_produce(bootstrap, source_topic(app_id), [(k, b"x", None) for k in keys]))
        counts = worker.wait_for("/counts/", lambda c: sum(c.values()) >= len(keys))
        assert counts == dict(Counter(keys))
        assert worker.stop() == 0, worker.log_tail()
    return dict(counts)


def test_garbage_in_current_is_set_aside_and_restored(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_id = "it-damaged-current"
    monkeypatch.setenv(APP_ID_ENV, app_id)
    data_dir = tmp_path / "worker"
    keys = [f"k{i % 9}" for i in range(90)] + ["k1"] * 4
    expected = _run_and_fill(kafka_bootstrap, data_dir, app_id, keys)
    store = _store(data_dir, 0)
    (store / "CURRENT").write_bytes(b"\x00\x01 garbage, not a manifest\n")

    with WorkerProcess(APP, kafka_bootstrap, data_dir) as worker:
        restored = worker.wait_for("/counts/", lambda c: sum(c.values()) >= len(keys), timeout=180)
        assert restored == expected
        time.sleep(2)  # still running, and nothing more arrives
        assert worker.get_json("/counts/") == expected
        [line] = _warnings(worker, "is unreadable")
        assert f"local store of table {TABLE} partition 0 is unreadable (Corruption: " in line
        assert "Traceback" not in worker.log_path.read_text()
    [kept] = (store.parent / DAMAGED_DIR).iterdir()
    assert kept.name.startswith(f"{TABLE}-0.db.")
    assert (kept / "CURRENT").read_bytes().startswith(b"\x00\x01 garbage")


def test_truncated_sst_is_set_aside_and_restored(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_id = "it-damaged-sst"
    monkeypatch.setenv(APP_ID_ENV, app_id)
    data_dir = tmp_path / "worker"
    keys = [f"k{i % 13}" for i in range(130)]
    expected = _run_and_fill(kafka_bootstrap, data_dir, app_id, keys)
    store = _store(data_dir, 1)
    ssts = sorted(store.glob("*.sst"))
    # A stopped worker's store may hold its data in the write-ahead log only; then there is
    # no table file to truncate, and the log is damaged instead.
    victim = ssts[0] if ssts else sorted(store.glob("MANIFEST-*"))[0]
    os.truncate(victim, victim.stat().st_size // 2)

    with WorkerProcess(APP, kafka_bootstrap, data_dir) as worker:
        restored = worker.wait_for("/counts/", lambda c: sum(c.values()) >= len(keys), timeout=180)
        assert restored == expected
        [line] = _warnings(worker, "is unreadable")
        assert f"local store of table {TABLE} partition 1 is unreadable (" in line
    assert len(list((store.parent / DAMAGED_DIR).iterdir())) == 1


def test_recreated_changelog_rebuilds_the_store(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_id = "it-damaged-changelog"
    monkeypatch.setenv(APP_ID_ENV, app_id)
    data_dir = tmp_path / "worker"
    keys = [f"k{i % 11}" for i in range(110)]
    _run_and_fill(kafka_bootstrap, data_dir, app_id, keys)

    # The changelog is recreated with fewer records: one in the partition the source's key
    # "k-new" goes to (as Faust's own write would), none in the other.
    changelog = changelog_topic(app_id)
    partitions = list(range(PARTITIONS))
    filled = DefaultPartitioner()(b"k-new", partitions, partitions)
    asyncio.run(_recreate_topic(kafka_bootstrap, changelog, PARTITIONS))
    # Faust writes a table's changelog keys and values as JSON.
    asyncio.run(_produce(kafka_bootstrap, changelog, [('"k-new"', b"3", filled)]))

    with WorkerProcess(APP, kafka_bootstrap, data_dir) as worker:
        restored = worker.wait_for("/counts/", lambda c: c == {"k-new": 3}, timeout=180)
        time.sleep(2)
        assert worker.get_json("/counts/") == restored
        lines = _warnings(worker, "rebuilt from the changelog")
        assert len(lines) == 2, lines
        assert any(
            f"table {TABLE} partition {filled}: changelog {changelog} ends at 1 but the local "
            "store claims " in line
            for line in lines
        ), lines
        assert any(
            f"table {TABLE} partition {1 - filled}: changelog {changelog} ends at 0 but the "
            "local store claims " in line
            for line in lines
        ), lines
        log = worker.log_path.read_text()
        assert "ConsistencyError" not in log and "Traceback" not in log
        # The table goes on from the rebuilt state.
        asyncio.run(_produce(kafka_bootstrap, source_topic(app_id), [("k-new", b"x", None)]))
        worker.wait_for("/counts/", lambda c: c == {"k-new": 4})
    [damaged] = data_dir.rglob(DAMAGED_DIR)
    assert sorted(p.name.split(".db.")[0] for p in damaged.iterdir()) == [
        f"{TABLE}-0",
        f"{TABLE}-1",
    ]
