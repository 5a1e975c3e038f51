"""A stream record handed straight to the queue of the one stream that reads its topic.

The fetch loop hands each stream record to Faust's conductor (the consumer's callback): it looks
up the record's partition's handler under a lock, waits for the flow and the producer's buffer,
counts the channels that read the topic on the record, decodes it once through each channel's
``decode`` (Faust's schema, the serializer registry's calls and its codec lookups per key and
value, streamapp's bad-record guard around them), and puts the event in each channel's queue.
For a topic that one channel reads (an agent's topic, the usual case), `DirectDelivery` does the
same with what can be looked up once looked up once: the channel, its queue, its codecs
(`streamapp.codecs.resolved`: the registry's codec and payload preparation, the same
values and errors), the pressure callbacks of each partition.

A record whose key or value does not decode this way (or has no key where a model is expected,
or no value where one must decode) is handed to the conductor instead, whose decode raises or
stands in for it as before: `streamapp.bad_records` handles it. Anything less plain keeps the
conductor (`for_topic` returns None): a topic several channels read, a channel of isolated
partitions or of a topic pattern, a channel that is not streamapp's topic
(`streamapp.bad_records.Topic`, the App's ``Topic`` setting) or whose schema is not Faust's own,
a conductor that is not Faust's, a serializer registry that is not Faust's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from faust.serializers.schemas import Schema
from faust.transport.conductor import Conductor
from faust.types import TP, AppT, Message
from faust.types.models import ModelT

from streamapp.codecs import resolved as resolved_codecs

#: Where a value must decode: Faust's ``allow_empty`` off and a model expected.
_MUST_DECODE = object()


def _is_model(typ: Any) -> bool:
    return isinstance(typ, type) and issubclass(typ, ModelT)


class DirectDelivery:
    """Delivery of one topic's records to the one channel that reads it (see the module)."""

    __slots__ = (
        "app",
        "channel",
        "consumer",
        "create_event",
        "flow_control",
        "load_key",
        "load_value",
        "missing_key",
        "missing_value",
        "pressure",
        "producer_buffer",
        "queue",
    )

    def __init__(
        self,
        app: AppT,
        channel: Any,
        load_key: Callable[[bytes], Any],
        load_value: Callable[[bytes], Any],
    ) -> None:
        self.app = app
        self.channel = channel
        self.queue = channel.queue
        self.consumer: Any = app.consumer
        self.create_event = app.create_event
        self.flow_control = app.flow_control
        self.producer_buffer = app.producer.buffer
        self.load_key = load_key
        self.load_value = load_value
        schema = channel.schema
        # What Faust's decode makes of a missing key or value: None, or an error for a model.
        self.missing_key: Any = _MUST_DECODE if _is_model(schema.key_type) else None
        self.missing_value: Any = (
            _MUST_DECODE if not schema.allow_empty and _is_model(schema.value_type) else None
        )
        #: Partition -> the callbacks the conductor would give its queue (kept: the queue
        #: keeps pending drop callbacks in a set, so they must be the same objects each time).
        self.pressure: dict[TP, tuple[Callable[[], None], Callable[[], None]]] = {}

    @classmethod
    def for_topic(cls, app: AppT, topic: str) -> DirectDelivery | None:
        """The topic's direct delivery, or None where the conductor must deliver it."""
        from streamapp.bad_records import Topic  # it imports the runtime's modules

        conductor: Any = app.topics
        if type(conductor) is not Conductor:
            return None
        readers = []
        for channel in conductor:
            if getattr(channel, "pattern", None) is not None:
                return None  # which topics a pattern reads is the conductor's to know
            if topic in channel.topics:
                readers.append(channel)
        if len(readers) != 1:
            return None
        (channel,) = readers
        schema = channel.schema
        if (
            type(channel) is not Topic
            or type(schema) is not Schema
            or channel.active_partitions is not None
        ):
            return None
        for typ in (schema.key_type, schema.value_type):
            if typ is not None and not isinstance(typ, type):
                return None  # Faust's check of a missing key or value would not be ours
        registry = app.serializers
        load_key = resolved_codecs.loader(registry, "key", schema.key_type, schema.key_serializer)
        load_value = resolved_codecs.loader(
            registry, "value", schema.value_type, schema.value_serializer
        )
        if load_key is None or load_value is None:
            return None
        return cls(app, channel, load_key, load_value)

    def _pressure(self, tp: TP) -> tuple[Callable[[], None], Callable[[], None]]:
        found = self.pressure.get(tp)
        if found is None:
            on_topic_buffer_full = self.app.sensors.on_topic_buffer_full
            consumer = self.consumer

            def on_pressure_high() -> None:
                on_topic_buffer_full(tp)
                consumer.on_buffer_full(tp)

            def on_pressure_drop() -> None:
                consumer.on_buffer_drop(tp)

            found = self.pressure[tp] = (on_pressure_high, on_pressure_drop)
        return found

    async def deliver(self, message: Message) -> bool:
        """Decode ``message`` and put its event in the channel's queue, waiting for room as the
        conductor does; False, with nothing done, if it does not decode here (the caller hands
        it to the conductor)."""
        key, value = message.key, message.value
        try:
            k = self.missing_key if key is None else self.load_key(key)
            v = self.missing_value if value is None else self.load_value(value)
        except Exception:
            return False
        if k is _MUST_DECODE or v is _MUST_DECODE:
            return False
        event = self.create_event(k, v, message.headers, message)
        flow_control = self.flow_control
        if not flow_control.is_active():
            await flow_control.acquire()
        buffer = self.producer_buffer
        if buffer.size > buffer.max_messages:
            await buffer.wait_until_ebb()
        message.incref(1)  # one channel reads it
        queue = self.queue
        tp = message.tp
        on_pressure_high, on_pressure_drop = self._pressure(tp)
        if queue.full():
            self.app.sensors.on_topic_buffer_full(tp)
            await queue.put(event)
        else:
            queue.put_nowait_enhanced(
                event, on_pressure_high=on_pressure_high, on_pressure_drop=on_pressure_drop
            )
        return True
