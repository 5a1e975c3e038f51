"""What `streamapp.batches` needs of Faust's stream and consumer: a batch acked once, and the
current event set once per batch.

Faust's stream acks each event as the agent takes the next one: per record, a lock taken three
times (``Message.ack``, ``decref``, ``Consumer.ack``) and a wake-up of whoever waits for acks.
`ack_batch` does the same bookkeeping for every record of a batch under one hold of Faust's
``ack_lock``, and wakes the waiters once: the records become committable together, after the
whole batch was processed, so a commit's offset never falls inside a batch.

`set_current_event` is the stream's own ``_set_current_event``: Faust reads the current event
(``faust.current_event()``) to route a table write to its changelog partition and, in
`streamapp.faust_compat.sends`, a send to its source partition's transaction.

Faust private names this relies on (checked at import with the others,
`streamapp.faust_compat.PRIVATE_NAMES`): ``faust.streams.Stream._set_current_event`` and
``_channel_stop_iteration``; ``faust.transport.consumer.Consumer._acked``, ``_acked_index``,
``_n_acked``, ``_committed_offset``, ``_unacked_messages`` and ``_waiting_for_ack`` (what its
``ack`` writes, in the same order). Delete when Faust's stream hands out and acks events in
batches. Tests: tests/unit/streamapp/test_batches.py; tests/integration/test_batch_agent.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from faust.types import EventT, Message, StreamT
from faust.types.tuples import ack_lock
from mode.utils.futures import notify


def set_current_event(stream: StreamT[Any], event: EventT[Any] | None) -> None:
    """``event`` is what Faust's ``current_event()`` returns in the agent's task; the stream's
    own ``current_event`` stays None: no single record of a batch is being processed."""
    stream._set_current_event(event)  # type: ignore[attr-defined]
    stream.current_event = None


def stop_iteration(stream: StreamT[Any]) -> None:
    """What Faust's stream iterator does with its channel when its iteration ends."""
    stream._channel_stop_iteration(stream.channel)  # type: ignore[attr-defined]


def ack_batch(consumer: Any, messages: Sequence[Message]) -> list[Message]:
    """Ack every message of a batch once (as each stream reading it would); return those whose
    last reference this was (Faust's ``on_message_out`` sensors are called for them)."""
    final: list[Message] = []
    acks_enabled_for = consumer.app.topics.acks_enabled_for
    committed_offsets = consumer._committed_offset
    acked_index = consumer._acked_index
    acked = consumer._acked
    unacked = consumer._unacked_messages
    n_acked = 0
    with ack_lock:
        try:
            for message in messages:
                if message.acked:
                    continue
                refcount = message.refcount = max(message.refcount - 1, 0)
                if refcount:
                    continue  # another stream reads it too, and acks it later
                message.acked = True
                final.append(message)
                if not acks_enabled_for(message.topic):
                    continue
                tp, offset = message.tp, message.offset
                committed = committed_offsets[tp]
                if committed is None or offset >= committed:
                    index = acked_index[tp]
                    if offset not in index:
                        unacked.discard(message)
                        index.add(offset)
                        acked[tp].append(offset)
                        n_acked += 1
        finally:
            consumer._n_acked += n_acked
            notify(consumer._waiting_for_ack)
    return final
