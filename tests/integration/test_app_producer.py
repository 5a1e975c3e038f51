"""The app's producer against a real broker: a topic Faust declares is created as Faust's driver
creates it, and a record keyed without a partition goes where `key_partition` says.

Faust creates its internal topics (changelogs, the leader topic, repartition topics) through
the app's producer (`streamapp.runtime.producer.app_producer.AppProducer.create_topic`), with
aiokafka's admin client here: the topic gets its partitions and config (cleanup policy and
retention from the declaration, the config given over them), a topic that exists is fine, and
``ensure_created`` refuses one this call did not create.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError

from streamapp import App
from streamapp.runtime.producer.app_producer import AppProducer
from streamapp.testing.kafka_io import create_topic


async def _described(bootstrap: str, topic: str) -> tuple[int, dict[str, str]]:
    """The topic's partition count and its config (the two keys Faust sets)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
        (response,) = await admin.describe_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC,
                    topic,
                    dict.fromkeys(["cleanup.policy", "retention.ms"]),
                )
            ]
        )
        (resource,) = response.to_object()["resources"]
        entries = resource["config_entries"]
        return len(described["partitions"]), {
            entry["config_names"]: entry["config_value"] for entry in entries
        }
    finally:
        await admin.close()


async def test_a_declared_topic_is_created_as_fausts_driver_creates_it(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    app = App(
        f"app-producer-{uuid.uuid4().hex[:8]}",
        broker=f"kafka://{kafka_bootstrap}",
        datadir=str(tmp_path),
    )
    producer: Any = app.producer
    assert isinstance(producer, AppProducer)
    topic = f"declared-{uuid.uuid4().hex[:8]}"
    elsewhere = f"elsewhere-{uuid.uuid4().hex[:8]}"
    await producer.start()
    try:
        # The config given wins over the retention declared.
        config_given = {"retention.ms": "7200000"}
        await producer.create_topic(
            topic, 3, 1, retention=3600.0, compacting=True, deleting=True, config=config_given
        )
        partitions, config = await _described(kafka_bootstrap, topic)
        assert partitions == 3
        assert config == {"cleanup.policy": "compact,delete", "retention.ms": "7200000"}
        # The producer's metadata has it now: a send finds it without waiting.
        assert producer.started_client().client.cluster.partitions_for_topic(topic) == {0, 1, 2}
        # Declared again (another table of the same changelog, a restart): fine, unchanged.
        await producer.create_topic(topic, 3, 1, ensure_created=True)
        assert (await _described(kafka_bootstrap, topic))[0] == 3

        # Created by someone else, unknown to the producer's metadata: fine, unless this call
        # must be the one that creates it.
        await create_topic(kafka_bootstrap, elsewhere, 2)
        await producer.create_topic(elsewhere, 5, 1)
        assert (await _described(kafka_bootstrap, elsewhere))[0] == 2
        other = App(
            f"app-producer-{uuid.uuid4().hex[:8]}",
            broker=f"kafka://{kafka_bootstrap}",
            datadir=str(tmp_path / "other"),
        ).producer
        other_topic = f"elsewhere-{uuid.uuid4().hex[:8]}"
        await other.start()
        try:
            await create_topic(kafka_bootstrap, other_topic, 2)
            with pytest.raises(TopicAlreadyExistsError):
                await other.create_topic(other_topic, 2, 1, ensure_created=True)
        finally:
            await other.stop()

        # A keyed record goes to the partition key_partition names.
        for key in (b"a", b"b", b"user-17", b"user-18"):
            delivered = await producer.send_and_wait(topic, key, b"v", None, None, None)
            assert producer.key_partition(topic, key).partition == delivered.partition
        assert producer.supports_headers()
    finally:
        await producer.stop()
