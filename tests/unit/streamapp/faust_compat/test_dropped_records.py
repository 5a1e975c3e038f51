"""faust_compat.dropped_records (transport fix 23): records the hand-out put in a stream's
queue and Faust's flow control dropped from it unprocessed stop counting as handed out at
once, never acked, and their offsets are not committed past.

No broker: a real streamapp app that never starts; its topic channel's queue is filled by hand
with events as the hand-out puts them there (tracked, one channel reference each). Every test
keeps its own references to the records, as the fetch loop's last record is kept: without the
fix they stayed in the consumer's weak set of unacked records for good.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faust.events import Event
from faust.types import TP
from faust.types.tuples import ConsumerMessage

from streamapp import App

TOPIC = "sa-dropped-in"
TP0 = TP(TOPIC, 0)


def _app(tmp_path: Path) -> Any:
    app = App("sa-dropped", num_standby_replicas=0, datadir=str(tmp_path))
    app.flow_control.resume()
    app.topics.acking_topics.add(TOPIC)  # as the conductor marks an agent's source topic
    return app


def _handed_out(app: Any, queue: Any, offset: int, *, channels: int = 1) -> Any:
    message = ConsumerMessage(
        TOPIC, 0, offset, 0.0, 0, [], b"k", b"v", None, generation_id=app.consumer_generation_id
    )
    message.incref(channels)  # as the conductor counts the channels it puts the record in
    message.tracked = True
    app.consumer.track_message(message)  # as the hand-out tracks it (transport)
    event = Event(app, message.key, message.value, [], message)
    queue.put_nowait(event)
    return event


def _committable(consumer: Any) -> dict[TP, int]:
    return dict(consumer._filter_committable_offsets(list(consumer._acked)))


async def test_records_dropped_as_the_worker_stops_are_no_longer_handed_out(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path)
    consumer = app.consumer
    queue = app.stream(app.topic(TOPIC, partitions=1)).channel.queue
    events = [_handed_out(app, queue, offset) for offset in range(4)]
    taken = queue.get_nowait()  # the agent took and processed the first one
    taken.message.ack(consumer)
    assert set(consumer.unacked) == {e.message for e in events[1:]}
    # As App._stop_consumer does before its wait_empty.
    app.flow_control.suspend()
    app.flow_control.clear()
    assert queue.empty()
    assert set(consumer.unacked) == set()  # wait_empty has nothing to wait for
    assert [e.message.acked for e in events] == [True, False, False, False]
    assert _committable(consumer) == {TP0: 1}  # not past the dropped records


async def test_a_resume_after_an_eager_revocation_untracks_what_it_drops(tmp_path: Path) -> None:
    app = _app(tmp_path)
    consumer = app.consumer
    queue = app.stream(app.topic(TOPIC, partitions=1)).channel.queue
    events = [_handed_out(app, queue, offset) for offset in range(2)]
    app.flow_control.suspend()
    app.flow_control.resume()  # Faust's recovery resumes the flow, clearing the queues
    assert set(consumer.unacked) == set()
    assert not any(e.message.acked for e in events)
    assert _committable(consumer) == {}


async def test_a_record_another_stream_still_holds_stays_handed_out(tmp_path: Path) -> None:
    app = _app(tmp_path)
    consumer = app.consumer
    queue = app.stream(app.topic(TOPIC, partitions=1)).channel.queue
    # Put in two channels: the other stream took it and is processing it.
    event = _handed_out(app, queue, 0, channels=2)
    app.flow_control.suspend()
    app.flow_control.clear()
    assert set(consumer.unacked) == {event.message}  # a commit still waits for it
    event.message.ack(consumer)  # the other stream is done with it
    assert set(consumer.unacked) == set() and event.message.acked
    assert _committable(consumer) == {TP0: 1}
