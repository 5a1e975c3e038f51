"""A real Kafka broker (KRaft, loopback) for the whole integration session.

Integration tests never skip for lack of a broker: this fixture starts one, from the jars
`streamapp kafka fetch` resolves, and fails loudly if it cannot.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streamapp.kafka import LocalKafka
from streamapp.kafka.probe import free_port


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
