"""The local broker is a real Kafka: a plain aiokafka client round-trips records through it."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streamapp.kafka import LocalKafka, broker_status
from streamapp.kafka.probe import broker_answers_metadata, free_port


async def test_produce_consume_round_trip(kafka_bootstrap: str) -> None:
    topic = f"round-trip-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for i in range(30):
            await producer.send_and_wait(topic, key=str(i % 3).encode(), value=f"v{i}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        group_id=f"g-{topic}",
    )
    await consumer.start()
    try:
        seen: list[bytes] = []
        while len(seen) < 30:
            batch = await consumer.getmany(timeout_ms=10_000)
            assert batch, "no records within 10 s"
            for records in batch.values():
                seen.extend(r.value for r in records if r.value is not None)
    finally:
        await consumer.stop()
    assert sorted(seen) == sorted(f"v{i}".encode() for i in range(30))


def test_broker_binds_loopback_and_is_found_again(kafka_broker: LocalKafka) -> None:
    state = broker_status(kafka_broker.port)
    assert state is not None and state.bootstrap == kafka_broker.bootstrap
    assert broker_answers_metadata("127.0.0.1", kafka_broker.port)
    # A second start on the same port finds the running broker instead of starting another.
    assert LocalKafka(port=kafka_broker.port, data_dir=kafka_broker.data_dir).start() == (
        kafka_broker.bootstrap
    )
    assert broker_status(kafka_broker.port) == state
    props = (kafka_broker.data_dir / "server.properties").read_text()
    assert f"listeners=PLAINTEXT://127.0.0.1:{kafka_broker.port}," in props


def test_cli_status_and_port_taken(kafka_broker: LocalKafka, tmp_path: Path) -> None:
    status = subprocess.run(
        [sys.executable, "-m", "streamapp", "kafka", "status", "--port", str(kafka_broker.port)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert f"running: {kafka_broker.bootstrap}" in status.stdout
    # The controller listener is ours but not a broker streamapp registered on that port.
    import socket

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        taken = subprocess.run(
            [
                sys.executable,
                "-m",
                "streamapp",
                "kafka",
                "start",
                "--port",
                str(port),
                "--dir",
                str(tmp_path / "k"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    assert taken.returncode == 1
    lines = taken.stderr.strip().splitlines()
    assert lines[-1].startswith("streamapp kafka start: port ") and "taken" in lines[-1]


def test_a_cluster_id_starting_with_a_dash_formats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One in 64 random ids starts with '-'; the storage tool must not read it as an option.
    monkeypatch.setattr("streamapp.kafka.broker.new_cluster_id", lambda: "-" + "A" * 21)
    broker = LocalKafka(port=free_port(), data_dir=tmp_path / "dash")
    try:
        assert broker.start() == broker.bootstrap
        assert "cluster.id=-AAAA" in (tmp_path / "dash" / "log" / "meta.properties").read_text()
    finally:
        broker.stop()
    assert broker_status(broker.port) is None


def _cli_kafka(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamapp", "kafka", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_cli_start_says_one_line_per_step(kafka_broker: LocalKafka, tmp_path: Path) -> None:
    port = str(free_port())
    where = ["--port", port, "--dir", str(tmp_path / "k")]
    try:
        started = _cli_kafka("start", *where)
        assert started.returncode == 0, started.stderr
        bootstrap = f"127.0.0.1:{port}"
        assert started.stdout == f"{bootstrap}\n"  # the address alone, for scripts
        # The jars are cached (the session's broker resolved them): two steps, two lines.
        assert started.stderr.splitlines() == [
            f"streamapp: starting Kafka {kafka_broker.kafka_version} (data in {tmp_path / 'k'})",
            f"streamapp: Kafka ready on {bootstrap} (its log: {tmp_path / 'k' / 'broker.log'})",
        ]
        again = _cli_kafka("start", *where)
        assert again.returncode == 0, again.stderr
        assert again.stdout == f"{bootstrap}\n"
        (line,) = again.stderr.splitlines()
        assert line.startswith(
            f"streamapp: Kafka {kafka_broker.kafka_version} already runs on {bootstrap} (pid "
        )
        # Another release on that port is refused, not handed the running one.
        other = "3.9.1" if kafka_broker.release.major >= 4 else "4.4.0"
        refused = _cli_kafka("start", *where, "--kafka-version", other)
        assert refused.returncode == 1
        assert f"already runs Kafka {kafka_broker.kafka_version} started by streamapp, not " in (
            refused.stderr
        )
    finally:
        stopped = _cli_kafka("stop", "--port", port)
        assert stopped.returncode == 0, stopped.stderr
