"""``Topic.send`` hands the record to the producer in one coroutine, doing what Faust's
layers do (`streamapp.sending.direct_send`).

Each parity case sends one record through `streamapp.App`'s topic and through Faust's own
``faust.Topic`` on the same app, and compares what the producer is handed, what the sensors
see, and what the delivery does (the FutureMessage, the send's callback, the sensors' completion
or error). The other cases check which sends skip Faust's ``publish_message`` and which keep it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from unittest import mock

import faust
import pytest
from faust.exceptions import AlreadyConfiguredWarning
from faust.types import TP, RecordMetadata

from streamapp import App
from streamapp.bad_records import Topic as StreamappTopic
from streamapp.sending import direct_send

TOPIC = "out"


class Recorder:
    """Stands in for the producer: notes each send and keeps its delivery future."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.futures: list[asyncio.Future[Any]] = []

    async def send(self, topic: str, key: Any, value: Any, **kwargs: Any) -> asyncio.Future[Any]:
        self.sent.append((topic, key, value, sorted(kwargs.items())))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


class SensorLog(faust.Sensor):
    """Notes what the sensors are told about sends."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    def on_send_initiated(
        self, producer: Any, topic: str, message: Any, keysize: int, valsize: int
    ) -> Any:
        self.calls.append(("initiated", topic, message.key, message.value, keysize, valsize))
        return ("state", topic)

    def on_send_completed(self, producer: Any, state: Any, metadata: RecordMetadata) -> None:
        self.calls.append(("completed", state, metadata.offset))

    def on_send_error(self, producer: Any, exc: BaseException, state: Any) -> None:
        self.calls.append(("error", state, type(exc).__name__))


def _app(tmp_path: Path, **options: Any) -> tuple[App, Recorder, SensorLog]:
    app = App("sa-direct-send", num_standby_replicas=0, datadir=str(tmp_path), **options)
    recorder = Recorder()
    app.maybe_start_producer = mock.AsyncMock(return_value=recorder)  # type: ignore[method-assign]
    sensor = SensorLog()
    app.sensors.add(sensor)
    return app, recorder, sensor


def _metadata(offset: int) -> RecordMetadata:
    return RecordMetadata(
        topic=TOPIC, partition=2, topic_partition=TP(TOPIC, 2), offset=offset, timestamp=None
    )


async def _deliver(
    topic: Any, recorder: Recorder, sensor: SensorLog, fail: bool, **send: Any
) -> tuple[Any, ...]:
    """Send one record, deliver it (or fail it); what the producer, sensors, callback and
    the returned future saw."""
    called: list[Any] = []
    returned = await topic.send(callback=called.append, **send)
    fut = recorder.futures[-1]
    if fail:
        fut.set_exception(RuntimeError("broker said no"))
    else:
        fut.set_result(_metadata(41))
    await asyncio.sleep(0)  # the done callbacks run
    (message,) = called if called else (None,)
    outcome = (
        returned is fut,
        recorder.sent.pop(),
        list(sensor.calls),
        None if message is None else message.result().offset,
    )
    sensor.calls.clear()
    return outcome


@pytest.mark.parametrize("fail", [False, True])
@pytest.mark.parametrize(
    "send",
    [
        {"key": "k1", "value": 7},
        {"key": "k1", "value": {"a": [1, 2]}, "partition": 3, "timestamp": 1700000000.5},
        {"key": b"raw-key", "value": b"raw", "headers": {"h": b"1"}},
        {"key": None, "value": "v", "value_serializer": "raw"},
    ],
)
async def test_direct_send_does_what_faust_does(
    tmp_path: Path, send: dict[str, Any], fail: bool
) -> None:
    app, recorder, sensor = _app(tmp_path)
    ours = app.topic(TOPIC, key_type=str)
    theirs = faust.Topic(app, topics=[TOPIC], key_type=str)
    assert type(ours).send is direct_send.Topic.send
    faust_outcome = await _deliver(theirs, recorder, sensor, fail, **send)
    our_outcome = await _deliver(ours, recorder, sensor, fail, **send)
    assert our_outcome == faust_outcome
    assert faust_outcome[0]  # the producer's future is what send returns
    assert faust_outcome[2][-1][0] == ("error" if fail else "completed")


async def test_a_send_skips_faust_layers(tmp_path: Path) -> None:
    app, recorder, _ = _app(tmp_path)
    topic = app.topic(TOPIC, key_type=str, value_type=int)
    with mock.patch.object(
        faust.Topic, "publish_message", side_effect=AssertionError("Faust's layers")
    ) as faust_publish:
        await topic.send(key="k", value=1)
    assert faust_publish.call_count == 0
    assert recorder.sent == [(TOPIC, b"k", b"1", _kwargs())]


def _kwargs() -> list[tuple[str, Any]]:
    return [("headers", {}), ("partition", None), ("timestamp", None)]


async def test_publish_on_commit_keeps_faust_path(tmp_path: Path) -> None:
    # stream_publish_on_commit attaches a send made while a record is processed to its commit:
    # only Faust's Topic.send knows how, so it keeps the whole path.
    app, recorder, _ = _app(tmp_path, stream_publish_on_commit=True)
    topic = app.topic(TOPIC, key_type=str, value_type=int)
    with mock.patch.object(
        faust.Topic, "publish_message", autospec=True, side_effect=faust.Topic.publish_message
    ) as faust_publish:
        await topic.send(key="k", value=1)
    assert faust_publish.call_count == 1
    assert recorder.sent == [(TOPIC, b"k", b"1", _kwargs())]


async def test_a_topic_class_of_its_own_publish_keeps_it(tmp_path: Path) -> None:
    published: list[Any] = []

    class Counted(StreamappTopic):
        async def publish_message(self, fut: Any, wait: bool = False) -> Any:
            published.append(fut.message.value)
            return await super().publish_message(fut, wait=wait)

    app, recorder, _ = _app(tmp_path)
    topic = Counted(app, topics=[TOPIC], key_type=str, value_type=int)
    await topic.send(key="k", value=5)
    assert published == [b"5"]
    assert recorder.sent == [(TOPIC, b"k", b"5", _kwargs())]


async def test_the_topic_name_is_the_one_it_has_at_each_send(tmp_path: Path) -> None:
    # ``topics`` is a plain attribute of Faust's topic: its name is asked per send, as Faust's
    # publish_message does, not kept from the first.
    app, recorder, _ = _app(tmp_path)
    topic = app.topic(TOPIC, key_type=str, value_type=int)
    await topic.send(key="k", value=1)
    topic.topics = ["renamed"]
    await topic.send(key="k", value=2)
    assert [sent[0] for sent in recorder.sent] == [TOPIC, "renamed"]


async def test_publish_on_commit_set_after_a_send_is_seen_by_the_next(tmp_path: Path) -> None:
    app, recorder, _ = _app(tmp_path)
    topic = app.topic(TOPIC, key_type=str, value_type=int)
    await topic.send(key="k", value=1)
    # Faust allows it, with a warning, and its Topic.send reads the setting per send.
    with pytest.warns(AlreadyConfiguredWarning):
        app.conf.stream_publish_on_commit = True
    with mock.patch.object(
        faust.Topic, "publish_message", autospec=True, side_effect=faust.Topic.publish_message
    ) as faust_publish:
        await topic.send(key="k", value=2)
    assert faust_publish.call_count == 1
    assert [sent[2] for sent in recorder.sent] == [b"1", b"2"]
