"""A real Kafka broker (KRaft, loopback) for the whole integration session.

Integration tests never skip for lack of a broker: this fixture starts one, from the jars
`streamapp kafka fetch` resolves, and fails loudly if it cannot. Its release is the default
(4.4.0) unless ``STREAMAPP_KAFKA_VERSION`` picks another: `make integration` runs the suite on
4.4.0, then the broker- and protocol-sensitive modules on 3.9.1.

The tests of broker failures run a cluster of 3 instead (`kafka_cluster`), one per module that
asks for it: 3 JVMs, started as the module's first test needs them and stopped after its last.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streamapp.kafka import LocalKafka, LocalKafkaCluster, kafka_release
from streamapp.kafka.probe import free_port


def pytest_report_header() -> str:
    # Which release this run tested is the first thing to know when it fails on only one.
    return f"kafka: {kafka_release().version} (STREAMAPP_KAFKA_VERSION to choose)"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    broker = LocalKafka(port=free_port(), data_dir=tmp_path_factory.mktemp("kafka"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: LocalKafka) -> str:
    """``127.0.0.1:PORT`` of the session's broker."""
    return kafka_broker.bootstrap


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaCluster]:
    """A cluster of 3 nodes (every one a broker and a controller; 3 replicas, 2 in sync), for
    the module's tests; a test that kills a node restarts it before it ends."""
    cluster = LocalKafkaCluster(3, ports=free_ports(3), data_dir=tmp_path_factory.mktemp("cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
