"""A fetched record of a topic an agent reads in batches, handed to its stream's queue in one
plain function call.

Faust's fetch loop hands each record out through four layers of coroutines: streamapp's
``hand_out_between_commits`` (`streamapp.faust_compat.transport`), the conductor's
``on_message`` (which takes the conductor's lock to find the partition's handler), that
handler (it awaits the flow control and the producer buffer, decodes the record through the
channel's compiled decoder, Faust's serializer registry and a codec looked up by name for the
key and again for the value, and puts the event in each subscribed channel's queue). For an
agent over batches (`streamapp.batches`) that was about a third of the CPU a record costs
(docs/performance.md).

`BatchHandOut` does the same steps for a record of a batch topic as one function call, when
none of them would wait: no commit holds the hand-out, the partition is not being given up,
the conductor's lock is free, the flow runs, Faust's producer buffer is not over its limit,
the partition has exactly one subscribed channel and that channel's queue has room, and the
record decodes with the codecs resolved once per channel. Then, in the order
``hand_out_between_commits`` and the conductor take them: the hand-out ledger's admission
(`streamapp.hand_out`), the record tracked as unacked, its reference counted, and the event put
in the queue with the same pressure callbacks (`on_buffer_full` / `on_buffer_drop` of its
partition). Anything else (a wait, a second channel, a record without key or value, a
decoding error, a changed schema or registry) returns False before any of those steps, and the
record takes the whole usual path, which decodes it again and handles its error as always.
So the ledger, the commit between records under exactly_once, flow control during a
rebalance and the bad-record policy see the same records in the same order as before.

A fetch's records of a batch topic mostly reach this a partition at a time
(`streamapp.faust_compat.partition_hand_out`): ``target_for`` checks the partition once and
``put`` hands out each record; the call per record (``__call__``) serves the records that
take Faust's fetch loop record by record.

Decoding with resolved codecs (`streamapp.faust_compat.resolved_codecs`) is what Faust's
``Schema.loads_key`` / ``loads_value`` do for a schema of Faust's own class (a subclass keeps
Faust's path).

Faust private names this relies on (checked at import, `streamapp.faust_compat.PRIVATE_NAMES`):
``faust.transport.conductor.Conductor._tp_index`` (the channels subscribed to a partition,
the set the conductor's handler delivers to) and ``_tp_to_callback_lock``.
Delete when Faust's fetch loop hands records to the conductor in batches.
Tests: tests/unit/streamapp/faust_compat/test_batch_hand_out.py;
tests/integration/test_batch_agent.py (a SIGKILL under exactly_once: nothing lost or repeated).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

from faust.serializers.schemas import Schema
from faust.types import TP, EventT, Message

from streamapp.faust_compat import resolved_codecs

#: Decodes a record into its event, or raises (the record then takes Faust's path).
Decoder = Callable[[Message], EventT[Any]]


def resolved_decoder(app: Any, channel: Any) -> Decoder | None:
    """A decoder for ``channel``'s records with its codecs looked up once, or None when its
    schema or the app's registry is not Faust's own class (those keep Faust's path)."""
    schema = getattr(channel, "schema", None)
    if type(schema) is not Schema:
        return None
    registry = app.serializers
    load_key = resolved_codecs.loader(registry, "key", schema.key_type, schema.key_serializer)
    load_value = resolved_codecs.loader(
        registry, "value", schema.value_type, schema.value_serializer
    )
    if load_key is None or load_value is None:
        return None
    create_event = app.conf.Event

    def decode(message: Message) -> EventT[Any]:
        key, value = message.key, message.value
        if key is None or value is None:
            raise ValueError("no key or no value: Faust's decoder knows what to do")
        return create_event(  # type: ignore[no-any-return]
            app, load_key(key), load_value(value), message.headers, message
        )

    return decode


class _Target:
    """Where a partition's records go: its one channel, decoder and pressure callbacks."""

    __slots__ = ("channel", "channels", "decode", "on_pressure_drop", "on_pressure_high", "queue")

    def __init__(
        self, consumer: Any, tp: TP, channels: Any, channel: Any, decode: Decoder | None
    ) -> None:
        self.channels = channels
        self.channel = channel
        self.queue = channel.queue
        self.decode = decode
        app = consumer.app
        on_topic_buffer_full = app.sensors.on_topic_buffer_full
        on_buffer_full = consumer.on_buffer_full
        on_buffer_drop = consumer.on_buffer_drop

        # What the conductor's handler passes for the partition (Faust's ConductorCompiler).
        def on_pressure_high() -> None:
            on_topic_buffer_full(tp)
            on_buffer_full(tp)

        def on_pressure_drop() -> None:
            on_buffer_drop(tp)

        self.on_pressure_high = on_pressure_high
        self.on_pressure_drop = on_pressure_drop


class BatchHandOut:
    """Hands a batch topic's fetched record to its stream in one call, when nothing would wait
    (see the module). ``admit`` is the consumer's hand-out ledger admission (False: refused,
    as ``hand_out_between_commits`` refuses it); ``handing_out`` the event a commit clears;
    ``giving_up`` the partitions being given up."""

    def __init__(
        self,
        consumer: Any,
        admit: Callable[[Message], bool],
        handing_out: Any,
        giving_up: set[TP],
    ) -> None:
        app = consumer.app
        self.consumer = consumer
        self.app = app
        self._admit = admit
        self._handing_out = handing_out
        self._giving_up = giving_up
        self._targets: dict[TP, _Target] = {}
        self._producer_buffer: Any = None
        self._producer_threaded = False
        #: Records handed out here, and those left to the usual path (the tests).
        self.handed_out = 0
        self.declined = 0

    @cached_property
    def _conductor(self) -> Any:
        return self.app.topics

    @cached_property
    def _flow_control(self) -> Any:
        return self.app.flow_control

    def _producer_buffer_over(self) -> bool:
        """Whether the conductor would wait for Faust's producer buffer (``wait_until_ebb``)."""
        buffer = self._producer_buffer
        if buffer is None:  # the app's producer and its setting, once they are needed
            buffer = self._producer_buffer = self.app.producer.buffer
            self._producer_threaded = bool(self.app.conf.producer_threaded)
        threaded = self._producer_threaded
        # ``buffer.size`` reads the setting each time; unthreaded, it is the pending queue's.
        size = buffer.size if threaded else buffer.pending.qsize()
        return bool(size > buffer.max_messages)

    def _target(self, tp: TP) -> _Target | None:
        channels = self._conductor._tp_index.get(tp)
        if not channels or len(channels) != 1:
            return None
        target = self._targets.get(tp)
        if target is None or target.channels is not channels or target.channel not in channels:
            (channel,) = channels
            decode = resolved_decoder(self.app, channel)  # None: Faust's path, every time
            target = self._targets[tp] = _Target(self.consumer, tp, channels, channel, decode)
        return target if target.decode is not None else None

    def target_for(self, tp: TP) -> _Target | None:
        """Where ``tp``'s records go when nothing in their hand-out would wait, else None (then
        they take the usual path): what ``hand_out_between_commits`` and the conductor would
        wait for or do otherwise, checked for the partition. Nothing here changes while the
        event loop runs no other task, so it holds for a run of the partition's records handed
        out in one call (`streamapp.faust_compat.partition_hand_out`)."""
        if (
            not self._handing_out.is_set()
            or tp in self._giving_up
            or self._conductor._tp_to_callback_lock.locked()
            or not self._flow_control.is_active()
            or self._producer_buffer_over()
        ):
            return None
        return self._target(tp)

    def flow_is_active(self) -> bool:
        """Whether the app's flow control lets records through (the conductor's ``acquire``)."""
        return bool(self._flow_control.is_active())

    def put(self, target: _Target, message: Message) -> bool:
        """``message`` (of ``target``'s partition) admitted, tracked and put in the queue, or
        refused by the ledger: True. False when its queue is full or it does not decode with
        the resolved codecs: then nothing was done, and it takes the usual path."""
        decode = target.decode
        if decode is None or target.queue.full():
            return False
        try:
            event = decode(message)
        except Exception:  # Faust's path decodes it again and handles the error
            return False
        if not self._admit(message):
            return True
        if not message.tracked:
            message.tracked = True
            self.consumer.track_message(message)
        message.incref(1)
        target.queue.put_nowait_enhanced(
            event,
            on_pressure_high=target.on_pressure_high,
            on_pressure_drop=target.on_pressure_drop,
        )
        self.handed_out += 1
        return True

    def __call__(self, message: Message | None) -> bool:
        """True when the record was handed out (or refused by the ledger) here; False when
        nothing was done and it takes the usual path."""
        if message is None:
            return False
        target = self.target_for(message.tp)
        if target is None or not self.put(target, message):
            self.declined += 1
            return False
        return True
