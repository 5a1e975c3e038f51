"""What the joins share with Faust: decoding with a topic's own codecs, and sending.

A join consumes its source topics as raw bytes through one agent (so that they are one
co-partition group) and decodes each record with the codecs the user declared on that
source's topic; it stores raw bytes in its tables (base64 in JSON) and decodes them again
when they are emitted.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from faust.types import TP, AppT, TopicT

from streamapp.sending import batch_changelog, sends

Headers = Sequence[tuple[str, bytes]]

RAW: dict[str, Any] = {
    "key_type": bytes,
    "value_type": bytes,
    "key_serializer": "raw",
    "value_serializer": "raw",
}


def b64(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode("ascii")


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _codec(topic: TopicT, which: str) -> Any:
    # faust.Topic has key_serializer/value_serializer; TopicT does not declare them.
    return getattr(topic, f"{which}_serializer", None)


def loads_key(app: AppT, topic: TopicT, raw: bytes | None) -> Any:
    return app.serializers.loads_key(topic.key_type, raw, serializer=_codec(topic, "key"))


def loads_value(app: AppT, topic: TopicT, raw: bytes | None) -> Any:
    if raw is None:
        return None
    return app.serializers.loads_value(topic.value_type, raw, serializer=_codec(topic, "value"))


def dumps_key(app: AppT, topic: TopicT, key: Any) -> bytes | None:
    return app.serializers.dumps_key(topic.key_type, key, serializer=_codec(topic, "key"))


def dumps_value(app: AppT, topic: TopicT, value: Any) -> bytes | None:
    return app.serializers.dumps_value(topic.value_type, value, serializer=_codec(topic, "value"))


def event_time_ms(message: Any) -> int:
    """The record's Kafka timestamp, in milliseconds."""
    return round(float(message.timestamp) * 1000)


async def send_raw(
    app: AppT,
    source: Any,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Headers | None = None,
) -> Awaitable[Any]:
    """Send bytes on behalf of the source record ``source`` (a Faust message).

    Returns the delivery future. Under exactly_once the send joins the transaction of the
    source's task, as Kafka Streams does it (`streamapp.sending.sends`, which sends an
    agent's ``Topic.send`` the same way).
    """
    return await sends.send_for_source(
        app, TP(source.topic, source.partition), topic, key, value, headers=headers or None
    )


async def send_output(
    app: AppT, source: Any, topic: str, key: bytes | None, value: bytes | None
) -> None:
    """Send an output record on behalf of the source record ``source``, without waiting for
    its delivery.

    In a batch (``batch_records``), the record waits with the batch's changelog records and
    goes out with them as the batch ends, before its ack, in its transaction under
    exactly_once, without a future of its own (`streamapp.sending.batch_changelog`);
    or earlier, when state is about to be forgotten (`flush_before_forgetting`). Otherwise
    it is sent at once (`send_raw`).
    """
    changelog = batch_changelog.current()
    if (
        changelog is not None
        and (key is not None or value is not None)
        and changelog.source == TP(source.topic, source.partition)
    ):
        changelog.add_output(topic, key, value)
        return
    await send_raw(app, source, topic, key, value)


async def dead_letter_late(
    app: AppT, message: Any, topic: str, owner: tuple[str, str], time_ms: int
) -> None:
    """Send a late record's bytes to ``topic``, headers saying why, and wait until delivered
    (before the record counts as handled). ``owner``: (``"join"`` or ``"aggregate"``, name)."""
    kind, name = owner
    headers = [
        (kind, name.encode()),
        ("reason", b"late"),
        ("source-topic", message.topic.encode()),
        ("source-partition", str(message.partition).encode()),
        ("source-offset", str(message.offset).encode()),
        ("event-time-ms", str(time_ms).encode()),
    ]
    delivered = await send_raw(app, message, topic, message.key, message.value, headers)
    await delivered


async def flush_before_forgetting(app: AppT) -> None:
    """Make everything sent so far durable, before state that stood for it is deleted.

    Under at-least-once this keeps "deleted from state" implying "its output is out" (see
    `streamapp.joins.core`). Under exactly_once the transaction does that already.
    """
    if not app.in_transaction:
        changelog = batch_changelog.current()
        if changelog is not None:  # a batch's output records, held until its end: sent now
            await changelog.send_outputs()
        await app.producer.flush()


Callback = Callable[[Any], Awaitable[None] | None]
