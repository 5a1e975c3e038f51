"""A topic the app declares, created on the broker as Faust's producer creates it.

Faust creates the topics it needs itself (tables' changelogs, repartition and agent topics, the
leader topic) through the app's producer (``ProducerT.create_topic``). Its aiokafka driver sends
CreateTopics to the controller on the producer's own connection; this does the same with
aiokafka's public admin client, on a connection of its own built with the producer's
settings, and keeps what Faust's does:

- a topic the producer's metadata already has is left alone;
- a topic the broker says exists is fine, unless ``ensure_created`` asks that this call create
  it (then it raises, as any other refusal does, with aiokafka's error for the code);
- the topic's config is Faust's: ``cleanup.policy`` from ``compacting`` / ``deleting``,
  ``retention.ms`` from ``retention``, and the ``config`` given over those;
- afterwards the producer's metadata is refreshed, so that a send to the topic finds it.

Tests: tests/unit/streamapp/runtime/producer/test_app_producer.py;
tests/integration/test_app_producer.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, for_code


def topic_config(
    retention_ms: int | None,
    compacting: bool | None,
    deleting: bool | None,
    config: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The topic's config as Faust declares it: its cleanup policy and retention, then
    ``config`` (which wins)."""
    policies = [name for name, wanted in (("compact", compacting), ("delete", deleting)) if wanted]
    made: dict[str, Any] = {}
    if policies:
        made["cleanup.policy"] = ",".join(policies)
    if retention_ms:
        made["retention.ms"] = retention_ms
    made.update(config or {})
    return made


async def create_topic(
    started_admin: Callable[[], Awaitable[AIOKafkaAdminClient]],
    known_topics: set[str],
    topic: str,
    partitions: int,
    replication: int,
    *,
    config: Mapping[str, Any],
    timeout_ms: int,
    ensure_created: bool,
    log: Any,
) -> bool:
    """Create ``topic`` (with the admin client ``started_admin`` gives) unless ``known_topics``
    (the producer's metadata) has it; True if this call created it. Raises aiokafka's error
    for any refusal but "it exists" (with ``ensure_created``, that one too). Logs to ``log``,
    the producer's service log, as Faust's driver does (``[^--Producer]: Creating topic``)."""
    log.info("Creating topic %r", topic)
    if topic in known_topics:
        log.debug("Topic %r exists, skipping creation.", topic)
        return False
    admin = await started_admin()
    new = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=replication,
        topic_configs=dict(config),
    )
    response = await admin.create_topics([new], timeout_ms=timeout_ms)
    (result,) = response.to_object()["topic_errors"]
    code = result["error_code"]
    if code == 0:
        log.info("Topic %r created.", topic)
        return True
    if code == TopicAlreadyExistsError.errno and not ensure_created:
        log.debug("Topic %r exists, skipping creation.", topic)
        return False
    reason = result.get("error_message") or ""
    raise for_code(code)(f"Cannot create topic: {topic} ({code}): {reason}")
