"""The ``server.properties`` a local node starts from: one broker alone, or a cluster's node."""

from __future__ import annotations

from pathlib import Path

from streamapp.kafka.config import Node, server_properties, single_node


def _settings(text: str) -> dict[str, str]:
    assert text.endswith("\n")
    pairs = [line.split("=", 1) for line in text.splitlines()]
    settings = {key: value for key, value in pairs}
    assert len(settings) == len(pairs), "a key written twice"
    return settings


def test_a_single_broker_is_its_own_quorum_with_one_replica_of_everything(tmp_path: Path) -> None:
    settings = _settings(server_properties(single_node(9092, 19092, tmp_path)))
    assert settings == {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": "1@127.0.0.1:19092",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:19092",
        "advertised.listeners": "PLAINTEXT://127.0.0.1:9092",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(tmp_path / "log"),
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    }


def test_a_cluster_node_votes_in_one_quorum_and_replicates_everything_3_times(
    tmp_path: Path,
) -> None:
    voters = {3: 20003, 1: 20001, 2: 20002}
    node = Node(2, 9093, 20002, tmp_path / "node-2", voters)
    settings = _settings(server_properties(node))
    assert settings["node.id"] == "2"
    assert settings["process.roles"] == "broker,controller"
    assert settings["controller.quorum.voters"] == (
        "1@127.0.0.1:20001,2@127.0.0.1:20002,3@127.0.0.1:20003"
    )
    assert settings["listeners"] == "PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:20002"
    assert settings["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9093"
    assert settings["log.dirs"] == str(tmp_path / "node-2" / "log")
    # The app's topics and changelogs (created with the broker's defaults or 3 replicas) and
    # Kafka's own: 3 replicas, 2 in sync for an acks=all write.
    for key, value in {
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "share.coordinator.state.topic.replication.factor": "3",
        "share.coordinator.state.topic.min.isr": "2",
    }.items():
        assert settings[key] == value, key
    # The rest is the single broker's.
    single = _settings(server_properties(single_node(9093, 20002, tmp_path / "node-2")))
    same = set(single) - {
        "node.id",
        "controller.quorum.voters",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
    }
    assert {key: settings[key] for key in same} == {key: single[key] for key in same}
