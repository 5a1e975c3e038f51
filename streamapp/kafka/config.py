"""The files a local Kafka node starts from: its ``server.properties`` and its logging config.

A node is one JVM, broker and controller at once (KRaft's combined mode), bound to 127.0.0.1.
Alone (`streamapp.kafka.broker.LocalKafka`) it is its own controller quorum and every topic has
one replica. In a cluster (`streamapp.kafka.cluster.LocalKafkaCluster`) every node is a voter
of one quorum, so the cluster keeps a majority of its controllers with one node down, and
topics are replicated as a small production cluster's are: `CLUSTER_REPLICATION`.
Tests: tests/unit/streamapp/kafka/test_config.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"

#: What a cluster's topics default to: 3 replicas, of which 2 must have a write before an
#: ``acks=all`` producer hears it was written, so one broker can be down and nothing
#: acknowledged is lost. Kafka's internal topics (the group's offsets, the transactions'
#: state, the share groups' state) are replicated the same; they ignore the defaults.
CLUSTER_REPLICATION: Mapping[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}

#: One node: every internal topic has one replica, and small ones start faster.
SINGLE_REPLICATION: Mapping[str, str] = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
}


@dataclass(frozen=True)
class Node:
    """One node of a local Kafka: its id, where it listens, where it keeps its data, and the
    controller quorum's voters (node id -> controller port, itself included)."""

    node_id: int
    port: int
    controller_port: int
    data_dir: Path
    voters: Mapping[int, int]

    @property
    def in_cluster(self) -> bool:
        return len(self.voters) > 1


def single_node(port: int, controller_port: int, data_dir: Path) -> Node:
    """The one node of a single local broker: node 1, its own quorum."""
    return Node(1, port, controller_port, data_dir, {1: controller_port})


def server_properties(node: Node) -> str:
    """The node's ``server.properties``."""
    voters = ",".join(f"{node_id}@{HOST}:{port}" for node_id, port in sorted(node.voters.items()))
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(node.data_dir / "log"),
        # Topics are created on purpose, never by a client that names one: an auto-created
        # topic gets num.partitions whatever the app declares, so a deleted changelog came back
        # with 1 partition, and a source topic created by its first reader or writer was not
        # partitioned like the tables it feeds. Apps create theirs (`streamapp topics create`,
        # Faust's CreateTopics for its internal topics); a worker refuses a missing source topic.
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        **(CLUSTER_REPLICATION if node.in_cluster else SINGLE_REPLICATION),
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.num.partitions": "4",
        # Tests and the demo rebalance a lot; waiting 3 s for more members helps nobody here.
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def log4j2_properties(log_file: Path) -> str:
    """The same logging as `log4j_properties`, in log4j2's properties format (Kafka 4.x)."""
    return (
        "status=warn\n"
        "appender.file.type=File\n"
        "appender.file.name=FILE\n"
        f"appender.file.fileName={log_file}\n"
        "appender.file.layout.type=PatternLayout\n"
        "appender.file.layout.pattern=[%d] %p %m (%c)%n\n"
        "rootLogger.level=INFO\n"
        "rootLogger.appenderRef.file.ref=FILE\n"
        "logger.request.name=kafka.request.logger\n"
        "logger.request.level=WARN\n"
        "logger.controller.name=org.apache.kafka.controller\n"
        "logger.controller.level=INFO\n"
    )


def log4j_properties(log_file: Path) -> str:
    """The broker's log in ``log_file``, at INFO (Kafka 3.x, log4j 1)."""
    return (
        "log4j.rootLogger=INFO, file\n"
        "log4j.appender.file=org.apache.log4j.FileAppender\n"
        f"log4j.appender.file.File={log_file}\n"
        "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        "log4j.logger.kafka.request.logger=WARN\n"
        "log4j.logger.org.apache.kafka.controller=INFO\n"
    )
