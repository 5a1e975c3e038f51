"""A batch topic's record handed to its stream's queue in one call (faust_compat.batch_hand_out).

No broker: a real streamapp consumer and conductor of an app that never starts, a real topic and
its queue. What the one call hands out must be what Faust's path would (the event Faust's
decoder makes, the record tracked and counted once); whenever Faust's path would wait or do
something else, the call does nothing and says so.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from faust.serializers.schemas import Schema
from faust.transport.consumer import ConsumerMessage
from faust.types import TP

from streamapp import App
from streamapp.faust_compat.batch_hand_out import BatchHandOut, resolved_decoder
from streamapp.faust_compat.transport import IN_FETCH_LOOP, Consumer

TOPIC = "clicks"
TP0 = TP(TOPIC, 0)


def _app(tmp_path: Path) -> App:
    # Made in the test's own loop (an App made in a sync fixture leaves the later sync
    # tests of the session without an event loop).
    app = App("sa-batch-hand-out", num_standby_replicas=0, datadir=str(tmp_path))
    app.flow_control.resume()
    return app


def _channel(app: App, **kwargs: Any) -> Any:
    options: dict[str, Any] = {
        "key_type": str,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
    }
    options.update(kwargs)
    channel = app.topic(TOPIC, **options)
    app.topics._tp_index[TP0].add(channel)  # as the conductor indexes an assigned partition
    return channel


def _message(app: App, offset: int, key: bytes | None = b"k1", value: bytes | None = b"7") -> Any:
    return ConsumerMessage(
        TOPIC,
        0,
        offset,
        0.0,
        0,
        [],
        key,
        value,
        None,
        tp=TP0,
        generation_id=app.consumer_generation_id,
    )


def _hand_out(app: App) -> BatchHandOut:
    consumer = app.consumer
    assert isinstance(consumer, Consumer)
    return consumer._batch_hand_out


async def test_a_record_goes_to_the_queue_as_fausts_path_would_put_it(tmp_path: Path) -> None:
    app = _app(tmp_path)
    channel = _channel(app)
    hand_out = _hand_out(app)
    message = _message(app, 5)
    assert hand_out(message)
    assert channel.queue.qsize() == 1
    event = channel.queue.get_nowait()
    expected = await channel.decode(_message(app, 5), propagate=True)
    assert (event.key, event.value) == (expected.key, expected.value) == ("k1", b"7")
    assert event.message is message
    assert message.tracked and message in app.consumer.unacked
    assert message.refcount == 1
    assert hand_out.handed_out == 1


async def test_an_offset_handed_out_already_is_refused_by_the_ledger(tmp_path: Path) -> None:
    app = _app(tmp_path)
    channel = _channel(app)
    hand_out = _hand_out(app)
    assert hand_out(_message(app, 5))
    again = _message(app, 5)
    assert hand_out(again)  # dealt with: refused, as hand_out_between_commits refuses it
    assert channel.queue.qsize() == 1
    assert not again.tracked and again.refcount == 0


async def test_a_json_value_decodes_as_fausts_decoder_does(tmp_path: Path) -> None:
    app = _app(tmp_path)
    channel = _channel(app, value_type=None, value_serializer="json")
    decode = resolved_decoder(app, channel)
    assert decode is not None
    message = _message(app, 1, value=b'{"a": [1, 2]}')
    expected = await channel.decode(message, propagate=True)
    assert decode(message).value == expected.value == {"a": [1, 2]}


class _OwnSchema(Schema):
    pass


@pytest.mark.parametrize(
    "case",
    [
        "commit holds the hand-out",
        "flow suspended",
        "partition given up",
        "two channels",
        "queue full",
        "no value",
        "undecodable",
        "schema of its own",
        "conductor locked",
    ],
)
async def test_anything_faust_would_wait_for_or_handle_otherwise_takes_its_path(
    tmp_path: Path, case: str
) -> None:
    app = _app(tmp_path)
    channel = _channel(app, value_type=int, value_serializer="json")
    consumer = app.consumer
    assert isinstance(consumer, Consumer)
    hand_out = _hand_out(app)
    message = _message(app, 3, value=b"7")
    if case == "commit holds the hand-out":
        consumer._handing_out.clear()
    elif case == "flow suspended":
        app.flow_control.suspend()
    elif case == "partition given up":
        consumer._giving_up.add(TP0)
    elif case == "two channels":
        app.topics._tp_index[TP0].add(app.topic(TOPIC, value_type=bytes))
    elif case == "queue full":
        for offset in range(channel.queue.maxsize):
            channel.queue.put_nowait(offset)
    elif case == "no value":
        message = _message(app, 3, value=None)
    elif case == "undecodable":
        message = _message(app, 3, value=b"not json")
    elif case == "schema of its own":
        app.topics._tp_index[TP0].clear()
        _channel(app, schema=_OwnSchema(key_type=str, value_type=int, value_serializer="json"))
    elif case == "conductor locked":
        await app.topics._tp_to_callback_lock.acquire()
    queued = channel.queue.qsize()
    assert not hand_out(message)
    assert channel.queue.qsize() == queued
    assert not message.tracked and message.refcount == 0
    assert hand_out.declined == 1 and hand_out.handed_out == 0
    # Nothing was done: the ledger still admits the offset for Faust's path.
    assert consumer._admit(message)


async def test_the_fetch_loops_call_for_a_batch_topic_is_taken_in_one_call(tmp_path: Path) -> None:
    app = _app(tmp_path)
    channel = _channel(app)
    consumer = app.consumer
    assert isinstance(consumer, Consumer)
    consumer.hand_out_in_batches([TOPIC])
    message = _message(app, 8)

    async def fetch_loop() -> None:
        IN_FETCH_LOOP.set(True)
        consumer._fetched_topic, consumer._fetched_message = TOPIC, message
        hand_out = consumer._hand_out(message)
        flow = consumer.suspend_flow.wait()
        await consumer.wait_first(hand_out, flow)
        # Neither coroutine ran, and both were closed (no "never awaited" warning).
        assert hand_out.cr_frame is None and flow.cr_frame is None

    await asyncio.ensure_future(fetch_loop())
    assert channel.queue.qsize() == 1
    assert consumer.handed_out_at_once == 1
    assert consumer._batch_hand_out.handed_out == 1
