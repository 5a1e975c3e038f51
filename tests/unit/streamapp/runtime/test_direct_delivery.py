"""A record handed straight to the one stream that reads its topic
(`streamapp.runtime.direct_delivery`): the same event in the same queue as Faust's conductor
puts there, the conductor's way for anything it does not decode, and for topics it does not
take. A real streamapp app that never starts, no broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faust
from faust.types.tuples import ConsumerMessage

from streamapp import App
from streamapp.runtime.direct_delivery import DirectDelivery

TOPIC = "sa-direct-in"


class Click(faust.Record):
    ad: str


def _app(tmp_path: Path) -> Any:
    app = App("sa-direct", num_standby_replicas=0, datadir=str(tmp_path))
    app.flow_control.resume()
    return app


def _reader(app: Any, **kwargs: Any) -> Any:
    """The channel an agent's stream reads, as Faust registers it with the conductor."""
    channel = app.topic(TOPIC, partitions=1, **kwargs).clone(is_iterator=True)
    app.topics.add(channel)
    return channel


def _message(offset: int, key: bytes | None, value: bytes | None) -> Any:
    return ConsumerMessage(TOPIC, 0, offset, 0.0, 0, [], key, value, None)


async def test_the_event_is_the_one_the_conductor_decodes(tmp_path: Path) -> None:
    app = _app(tmp_path)
    channel = _reader(app, key_type=str, value_type=Click)
    delivery = DirectDelivery.for_topic(app, TOPIC)
    assert delivery is not None
    payload = Click(ad="a1").dumps(serializer="json")
    for offset, (key, value) in enumerate([(b'"k1"', payload), (None, payload)]):
        message = _message(offset, key, value)
        assert await delivery.deliver(message)
        event = channel.queue.get_nowait()
        faust_event = await channel.decode(_message(offset, key, value), propagate=True)
        assert (event.key, event.value) == (faust_event.key, faust_event.value)
        assert event.message is message and message.refcount == 1
    assert channel.queue.empty()


async def test_what_does_not_decode_here_is_left_to_the_conductor(tmp_path: Path) -> None:
    app = _app(tmp_path)
    channel = _reader(app, key_type=str, value_type=Click)
    delivery = DirectDelivery.for_topic(app, TOPIC)
    assert delivery is not None
    for key, value in [(b"not json", b"{}"), (b'"k"', b"{{"), (b'"k"', None), (b'"k"', b"3")]:
        message = _message(0, key, value)
        assert not await delivery.deliver(message)
        assert channel.queue.empty() and message.refcount == 0


def test_topics_the_conductor_keeps(tmp_path: Path) -> None:
    app = _app(tmp_path)
    assert DirectDelivery.for_topic(app, TOPIC) is None  # nobody reads it
    _reader(app)
    assert DirectDelivery.for_topic(app, TOPIC) is not None
    _reader(app)  # a second stream reads it too
    assert DirectDelivery.for_topic(app, TOPIC) is None
    other = _app(tmp_path / "other")
    isolated = other.topic(TOPIC, partitions=1).clone(
        is_iterator=True, active_partitions={faust.types.TP(TOPIC, 0)}
    )
    other.topics.add(isolated)
    assert DirectDelivery.for_topic(other, TOPIC) is None
    plain = _app(tmp_path / "plain")
    plain.topics.add(faust.topics.Topic(plain, topics=[TOPIC]).clone(is_iterator=True))
    assert DirectDelivery.for_topic(plain, TOPIC) is None  # not streamapp's bad-record topic
