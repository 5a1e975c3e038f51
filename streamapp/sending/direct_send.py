"""An agent's ``Topic.send``, handed to the producer without Faust's layers in between.

Faust's ``Topic.send`` reaches the producer through five coroutines: ``Topic.send`` (which
reads the ``stream_publish_on_commit`` setting), ``Channel._send_now``, streamapp's
``publish_message`` (`streamapp.bad_records.Topic`, which looks the message up among
``send_soon``'s buffered ones), Faust's ``publish_message`` (a debug log call, the topic's name
found through an ABC ``isinstance``) and ``_get_producer``. In the profile of the batch agent
(docs/performance.md) that was about half of what one output record cost on the event-loop
thread, aiokafka's own ``send`` being the other half.

`Topic.send` here does what those do, in the same order, in one coroutine: the message is
made by the topic's ``as_future_message`` (encoded as `topic_codecs` encodes it), the producer
is the app's ``maybe_start_producer()`` (under exactly_once the transaction manager, which
puts the send in the transaction of the record it is made for, `streamapp.sending.sends`),
the sensors' ``on_send_initiated`` is called before the producer's ``send`` and Faust's own
``Topic._on_published`` is the delivery callback (the ``FutureMessage`` resolved, the send's
``callback`` called, ``on_send_completed`` or ``on_send_error``). The returned future is the
producer's, as Faust's. So what a caller, a sensor, the commit's producer flush and an
exactly_once transaction see is Faust's.

Faust's whole path is kept for: ``stream_publish_on_commit`` (the send is attached to the
record's commit while one is processed), a message whose channel is not this topic, and a
topic class that overrides ``publish_message`` or ``_send_now`` other than as streamapp's own
(its override would be skipped otherwise). ``send_soon``, ``Agent.send`` and
``Event.forward`` are unchanged.

Faust private names (checked at import, `streamapp.private_names.PRIVATE_NAMES`):
``faust.topics.Topic._on_published`` (called) and ``faust.channels.Channel._send_now`` (read, to
find a topic class that overrides it). Delete when Faust's ``Topic.send`` calls the producer
without its layers.
Tests: tests/unit/streamapp/sending/test_direct_send.py; tests/integration/test_eos_sends.py
and test_batch_agent.py (what is sent under exactly_once, across a SIGKILL).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import faust
from faust.types import CodecArg, FutureMessage, K, RecordMetadata, SchemaT, V
from faust.types.core import HeadersArg
from faust.types.tuples import MessageSentCallback

# The Faust private names this module uses are checked as it is imported.
import streamapp.private_names  # noqa: F401
from streamapp.codecs import topic_codecs

#: ``publish_message`` implementations that do for a fresh message (one not buffered by
#: ``send_soon``) exactly what Faust's does; a topic class with another one keeps Faust's path.
#: streamapp's own (`streamapp.bad_records.Topic`) adds itself (`publishes_as_faust`).
_FAUST_LIKE_PUBLISH: set[Callable[..., Any]] = {faust.Topic.publish_message}

#: Topic class -> whether its sends may take the direct path (decided once per class).
_direct_classes: dict[type, bool] = {}


def publishes_as_faust(publish_message: Callable[..., Any]) -> None:
    """Declare that ``publish_message`` publishes a fresh message as Faust's does."""
    _FAUST_LIKE_PUBLISH.add(publish_message)
    _direct_classes.clear()


def _direct_class(cls: type) -> bool:
    direct = _direct_classes.get(cls)
    if direct is None:
        direct = _direct_classes[cls] = (
            getattr(cls, "publish_message", None) in _FAUST_LIKE_PUBLISH
            and getattr(cls, "_send_now", None) is faust.Topic._send_now
        )
    return direct


def _size(data: Any) -> int:
    # What Faust's sensors are given as a key's or value's size (faust.types.tuples._get_len).
    return len(data) if isinstance(data, bytes) else 0


class Topic(topic_codecs.Topic):
    """Faust's topic; ``send`` hands the record to the producer in one coroutine (module)."""

    async def send(
        self,
        *,
        key: K | None = None,
        value: V | None = None,
        partition: int | None = None,
        timestamp: float | None = None,
        headers: HeadersArg | None = None,
        schema: SchemaT[Any, Any] | None = None,
        key_serializer: CodecArg | None = None,
        value_serializer: CodecArg | None = None,
        callback: MessageSentCallback | None = None,
        force: bool = False,
    ) -> Awaitable[RecordMetadata]:
        # Read per send, as Faust's Topic.send reads it: a setting can be changed on the app.
        if self.app.conf.stream_publish_on_commit or not _direct_class(type(self)):
            return await super().send(
                key=key,
                value=value,
                partition=partition,
                timestamp=timestamp,
                headers=headers,
                schema=schema,
                key_serializer=key_serializer,
                value_serializer=value_serializer,
                callback=callback,
                force=force,
            )
        fut = self.as_future_message(
            key,
            value,
            partition,
            timestamp,
            headers,
            schema,
            key_serializer,
            value_serializer,
            callback,
        )
        return await self._publish_direct(fut)

    async def _publish_direct(self, fut: FutureMessage) -> Awaitable[RecordMetadata]:
        """Faust's ``Topic.publish_message(fut, wait=False)`` for a message of this topic."""
        message = fut.message
        if message.channel is not self:  # another channel's name: Faust finds it
            return await self.publish_message(fut)
        # Asked per send, as Faust does: a topic's ``topics`` is a plain attribute.
        topic = self.get_topic_name()
        app = self.app
        producer = await app.maybe_start_producer()
        key, value = message.key, message.value
        state = app.sensors.on_send_initiated(
            producer, topic, message=message, keysize=_size(key), valsize=_size(value)
        )
        sent: Any = await producer.send(
            topic,
            key,
            value,
            partition=message.partition,
            timestamp=message.timestamp,
            headers=message.headers,
        )
        sent.add_done_callback(
            partial(self._on_published, message=fut, state=state, producer=producer)
        )
        return sent  # type: ignore[no-any-return]
