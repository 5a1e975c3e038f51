"""A local cluster of 3 is a real Kafka cluster: `streamapp kafka start --brokers 3` starts it,
its topics have 3 replicas of which 2 must be in sync, and a plain aiokafka producer and
consumer go on through the crash of the broker that coordinates their group, losing nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import CommitFailedError, KafkaError

from streamapp.kafka import LocalKafkaCluster, broker_status
from streamapp.kafka.probe import free_port


def _consecutive_free_ports(count: int) -> int:
    """A port that is free with the ``count - 1`` after it (the command's nodes take them)."""
    while True:
        first = free_port()
        try:
            for port in range(first, first + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first


def _cli_kafka(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamapp", "kafka", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_command_starts_a_cluster_of_3_says_each_node_and_stops_it(tmp_path: Path) -> None:
    port = _consecutive_free_ports(3)
    bootstrap = ",".join(f"127.0.0.1:{port + i}" for i in range(3))
    try:
        started = _cli_kafka("start", "--brokers", "3", "--port", str(port), "--dir", str(tmp_path))
        assert started.returncode == 0, started.stderr
        assert started.stdout == f"{bootstrap}\n"
        assert len(started.stderr.splitlines()) == 2, started.stderr
        status = _cli_kafka("status", "--port", str(port + 1))
        assert status.returncode == 0, status.stdout
        lines = status.stdout.splitlines()
        assert [line.split(" (")[0] for line in lines] == [
            f"running: 127.0.0.1:{port + i}" for i in range(3)
        ]
        assert all(f"(node {i} of 3, Kafka " in lines[i - 1] for i in (1, 2, 3))
    finally:
        stopped = _cli_kafka("stop", "--port", str(port))
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout == f"stopped the cluster of 3 brokers on {bootstrap}\n"
    assert [broker_status(port + i) for i in range(3)] == [None] * 3


async def _partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, set[int], set[int]]]:
    """partition -> (leader, replicas, in-sync replicas), from the cluster's metadata; asked
    again while the node asked is down or does not know the topic yet (the admin client asks
    any node it knows, and each node learns of a new topic on its own)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        while True:
            try:
                [described] = await admin.describe_topics([topic])
            except KafkaError as exc:
                if not exc.retriable:
                    raise
            else:
                if described["partitions"]:
                    break
            await asyncio.sleep(0.5)
    finally:
        await admin.close()
    return {
        p["partition"]: (p["leader"], set(p["replicas"]), set(p["isr"]))
        for p in described["partitions"]
    }


async def _create(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` with 3 replicas, and wait until the metadata names each partition's
    leader (the node asked may learn of a new topic after the one that created it)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, replication_factor=3)])
    finally:
        await admin.close()
    while True:
        described = await _partitions(bootstrap, topic)
        if len(described) == partitions and all(leader >= 0 for leader, _, _ in described.values()):
            return
        await asyncio.sleep(0.2)


async def _wait_all_in_sync(bootstrap: str, topic: str) -> None:
    """Until every partition of ``topic`` has its 3 replicas in sync (a restarted node caught
    up), so that the next test starts on a whole cluster."""
    while True:
        described = await _partitions(bootstrap, topic)
        if all(isr == {1, 2, 3} for _, _, isr in described.values()):
            return
        await asyncio.sleep(0.5)


async def test_a_topic_has_3_replicas_2_in_sync_and_so_have_the_group_s_offsets(
    kafka_cluster: LocalKafkaCluster,
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = f"replicated-{uuid.uuid4().hex[:8]}"
    await _create(bootstrap, topic, 3)
    described = await _partitions(bootstrap, topic)
    assert sorted(described) == [0, 1, 2]
    assert all(replicas == {1, 2, 3} for _, replicas, _ in described.values()), described
    # Each node leads one: Kafka spreads the leaders of a new topic over the brokers.
    assert sorted(leader for leader, _, _ in described.values()) == [1, 2, 3]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [configs] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    [resource] = configs.to_object()["resources"]
    settings = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
    assert settings["min.insync.replicas"] == "2"
    # The group's offsets: Kafka's own topic, made as the group's coordinator is first asked.
    await kafka_cluster.coordinator(f"g-{topic}")
    offsets = await _partitions(bootstrap, "__consumer_offsets")
    assert offsets and all(replicas == {1, 2, 3} for _, replicas, _ in offsets.values())


async def test_a_plain_producer_and_consumer_go_on_through_the_coordinator_s_crash(
    kafka_cluster: LocalKafkaCluster,
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    await _create(bootstrap, topic, 3)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest"
    )
    await producer.start()
    await consumer.start()
    seen: list[bytes] = []
    victim: int | None = None

    async def consume(until: int) -> None:
        while len(set(seen)) < until:
            batch = await consumer.getmany(timeout_ms=1000)
            for records in batch.values():
                seen.extend(r.value for r in records if r.value is not None)
            with contextlib.suppress(CommitFailedError):  # rebalanced: read again, at least once
                await consumer.commit()

    async def produce(values: range) -> None:
        for i in values:
            await producer.send(topic, key=str(i % 9).encode(), value=str(i).encode())
        await producer.flush()

    try:
        await produce(range(300))
        await asyncio.wait_for(consume(300), 60)
        victim = await kafka_cluster.coordinator(group)
        leaders = {leader for leader, _, _ in (await _partitions(bootstrap, topic)).values()}
        assert victim in leaders  # each node leads one partition: it stops one of them too
        kafka_cluster.kill(victim)
        # Written while the node is down (acks=all: 2 of the 3 replicas), and read.
        await asyncio.wait_for(asyncio.gather(produce(range(300, 600)), consume(600)), 120)
        moved = await _partitions(bootstrap, topic)
        assert all(leader != victim for leader, _, _ in moved.values()), moved
        assert await kafka_cluster.coordinator(group) != victim
    finally:
        await consumer.stop()
        await producer.stop()
        if victim is not None:
            await asyncio.to_thread(kafka_cluster.restart, victim)
    assert sorted(set(seen), key=int) == [str(i).encode() for i in range(600)]
    await asyncio.wait_for(_wait_all_in_sync(bootstrap, topic), 120)
