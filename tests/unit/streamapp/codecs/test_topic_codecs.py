"""What an agent sends is encoded with codecs looked up once, the same bytes as Faust's topic.

Each case sends one record through `streamapp.App`'s topic and through Faust's own
``faust.Topic`` made with the same arguments on the same app, and compares what each hands the
producer: topic, key, value and headers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import faust
import pytest
from faust.serializers.registry import Registry
from faust.serializers.schemas import Schema

from streamapp import App
from streamapp.codecs import topic_codecs

TOPIC = "out"


class Point(faust.Record, serializer="json"):
    x: int
    y: int


class Tagged(faust.Record):  # no serializer of its own: the topic's or the app's
    name: str


class Word(str):
    pass


class Recorder:
    """Stands in for the producer ``Topic.send`` hands its record to: notes what it is given."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    async def send(self, topic: str, key: Any, value: Any, **kwargs: Any) -> asyncio.Future[Any]:
        self.sent.append((topic, key, value, kwargs["headers"]))
        return asyncio.get_running_loop().create_future()


def _app(tmp_path: Path, **options: Any) -> tuple[App, Recorder]:
    # Made in the test's own loop (an App made in a sync fixture leaves the later sync
    # tests of the session without an event loop).
    app = App("sa-send-codecs", num_standby_replicas=0, datadir=str(tmp_path), **options)
    recorder = Recorder()
    app.maybe_start_producer = mock.AsyncMock(return_value=recorder)  # type: ignore[method-assign]
    return app, recorder


async def _sent(app: App, recorder: Recorder, topic: Any, **send: Any) -> tuple[Any, ...]:
    await topic.send(**send)
    return recorder.sent.pop()


@pytest.fixture
def registry_calls() -> Iterator[list[str]]:
    """Calls of Faust's registry to encode a key or a value (Schema.dumps_key/dumps_value)."""
    calls: list[str] = []
    real_key, real_value = Registry.dumps_key, Registry.dumps_value

    def dumps_key(self: Registry, *args: Any, **kwargs: Any) -> Any:
        calls.append("key")
        return real_key(self, *args, **kwargs)

    def dumps_value(self: Registry, *args: Any, **kwargs: Any) -> Any:
        calls.append("value")
        return real_value(self, *args, **kwargs)

    with (
        mock.patch.object(Registry, "dumps_key", dumps_key),
        mock.patch.object(Registry, "dumps_value", dumps_value),
    ):
        yield calls


# (topic options, send options) pairs, each sent through both topics.
CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    # The throughput benchmark's output record.
    ({"key_type": str, "value_type": int}, {"key": "k1", "value": 12345}),
    ({}, {"key": "ünïcode", "value": "a str value"}),
    ({}, {"key": b"\x00bytes key", "value": b"\xffbytes value"}),
    ({}, {"key": "k", "value": {"a": [1, 2.5, "x"], "b": None, "ü": True}}),
    ({}, {"key": "k", "value": [1, {"c": False}]}),
    ({}, {"key": 7, "value": 2.5}),
    ({}, {"key": "k", "value": None}),
    ({}, {"key": None, "value": "no key"}),
    ({}, {"key": Word("sub"), "value": Word("classes of str")}),
    ({"value_type": Point}, {"key": "k", "value": Point(1, 2)}),
    ({}, {"key": Point(3, 4), "value": Tagged("a model, no serializer of its own")}),
    ({}, {"key": "k", "value": {"nested model": Point(5, 6)}}),
    # Serializers given to the topic, to the call, or both.
    ({"key_serializer": "json", "value_serializer": "raw"}, {"key": "k", "value": "raw text"}),
    ({"key_serializer": "raw", "value_serializer": "json"}, {"key": "k", "value": {"a": 1}}),
    ({}, {"key": "k", "value": {"a": 1}, "key_serializer": "json", "value_serializer": "pickle"}),
    ({"value_serializer": "json"}, {"key": "k", "value": "text", "value_serializer": "binary"}),
    ({}, {"key": "k", "value": {"a": 1}, "value_serializer": "json|binary"}),
    ({}, {"key": "k", "value": Tagged("t"), "value_serializer": "pickle"}),
    ({"value_type": str}, {"key": "k", "value": "typed str"}),
    ({"value_type": bytes}, {"key": "k", "value": b"typed bytes"}),
    # Headers, as a mapping and as a list.
    ({}, {"key": "k", "value": {"a": 1}, "headers": {"h1": b"one", "h2": b"two"}}),
    ({}, {"key": "k", "value": "v", "headers": [("h", b"1"), ("h", b"2")]}),
]


@pytest.mark.parametrize(("topic_options", "send_options"), CASES)
async def test_the_producer_gets_the_bytes_of_fausts_topic(
    tmp_path: Path, topic_options: dict[str, Any], send_options: dict[str, Any]
) -> None:
    app, recorder = _app(tmp_path)
    ours = app.topic(TOPIC, **topic_options)
    theirs = faust.Topic(app, topics=[TOPIC], **topic_options)
    assert isinstance(ours, topic_codecs.Topic) and not isinstance(theirs, topic_codecs.Topic)
    for _ in range(2):  # the first send resolves the codecs, the second uses them
        expected = await _sent(app, recorder, theirs, **send_options)
        assert await _sent(app, recorder, ours, **send_options) == expected


async def test_the_apps_own_serializers_count(tmp_path: Path) -> None:
    app, recorder = _app(tmp_path, key_serializer="json", value_serializer="raw")
    ours, theirs = app.topic(TOPIC), faust.Topic(app, topics=[TOPIC])
    for send, wire in (
        ({"key": "k", "value": "raw by the app"}, (b'"k"', b"raw by the app")),
        ({"key": {"k": 1}, "value": b"v"}, (b'{"k":1}', b"v")),
    ):
        expected = await _sent(app, recorder, theirs, **send)
        assert expected[1:3] == wire
        assert await _sent(app, recorder, ours, **send) == expected


async def test_plain_keys_and_values_skip_the_registry(
    tmp_path: Path, registry_calls: list[str]
) -> None:
    app, recorder = _app(tmp_path)
    ours = app.topic(TOPIC, key_type=str, value_type=int)
    theirs = faust.Topic(app, topics=[TOPIC], key_type=str, value_type=int)
    await _sent(app, recorder, theirs, key="k", value=1)
    assert registry_calls == ["key", "value"]  # Faust's path, for reference
    del registry_calls[:]
    for value in (1, 2, 3):
        assert (await _sent(app, recorder, ours, key="k", value=value))[1:3] == (
            b"k",
            str(value).encode(),
        )
    assert registry_calls == []


async def test_bytes_and_models_still_take_the_registry(
    tmp_path: Path, registry_calls: list[str]
) -> None:
    # Bytes pass as they are, a model picks its own serializer: the registry's own call.
    app, recorder = _app(tmp_path)
    ours = app.topic(TOPIC)
    await _sent(app, recorder, ours, key=b"k", value=Point(1, 2))
    assert registry_calls == ["key", "value"]


async def test_a_schema_of_its_own_keeps_fausts_path(
    tmp_path: Path, registry_calls: list[str]
) -> None:
    class HeaderSchema(Schema):
        def on_dumps_value_prepare_headers(self, value: Any, headers: Any) -> Any:
            return {**(headers or {}), "type": type(value).__name__.encode()}

    app, recorder = _app(tmp_path)
    ours = app.topic(TOPIC, schema=HeaderSchema(key_type=str, value_type=int))
    sent = await _sent(app, recorder, ours, key="k", value=1)
    assert sent[1:] == (b"k", b"1", {"type": b"int"})
    assert registry_calls == ["key", "value"]


async def test_a_schema_given_to_one_send_is_used_for_that_send(tmp_path: Path) -> None:
    app, recorder = _app(tmp_path)
    ours = app.topic(TOPIC, key_type=str, value_type=int)
    theirs = faust.Topic(app, topics=[TOPIC], key_type=str, value_type=int)
    schema = Schema(key_serializer="json", value_serializer="raw")
    send = {"key": "k", "value": "v", "schema": schema}
    assert await _sent(app, recorder, ours, **send) == await _sent(app, recorder, theirs, **send)
    assert (await _sent(app, recorder, ours, **send))[1:3] == (b'"k"', b"v")
    # ... and the topic's own schema still for the next.
    assert (await _sent(app, recorder, ours, key="k", value=5))[1:3] == (b"k", b"5")


async def test_an_updated_schema_is_followed(tmp_path: Path) -> None:
    app, recorder = _app(tmp_path)
    ours = app.topic(TOPIC, key_type=str)
    assert (await _sent(app, recorder, ours, key="k", value="v"))[1:3] == (b"k", b'"v"')
    ours.schema.update(key_serializer="json", value_serializer="raw")
    assert (await _sent(app, recorder, ours, key="k", value="v"))[1:3] == (b'"k"', b"v")


async def test_serializer_arguments_resolved_are_bounded(tmp_path: Path) -> None:
    app, recorder = _app(tmp_path)
    ours = app.topic(TOPIC)
    theirs = faust.Topic(app, topics=[TOPIC])
    for _ in range(topic_codecs.MAX_RESOLVED + 4):
        codec = faust.serializers.codecs.get_codec("json") | faust.serializers.codecs.binary()
        send = {"key": "k", "value": {"a": 1}, "value_serializer": codec}
        assert await _sent(app, recorder, ours, **send) == await _sent(
            app, recorder, theirs, **send
        )
    assert len(ours.streamapp_value_dumpers) == topic_codecs.MAX_RESOLVED


async def test_an_unencodable_value_raises_what_faust_raises(tmp_path: Path) -> None:
    app, recorder = _app(tmp_path)
    ours = app.topic(TOPIC)
    theirs = faust.Topic(app, topics=[TOPIC])
    with pytest.raises(TypeError) as faust_error:
        await theirs.send(key="k", value={"a": object()})
    with pytest.raises(TypeError) as our_error:
        await ours.send(key="k", value={"a": object()})
    assert str(our_error.value).split(" at 0x")[0] == str(faust_error.value).split(" at 0x")[0]
    assert recorder.sent == []
