"""faust_compat.dropped_records (transport fix 23): records the hand-out put in a stream's
queue and Faust's flow control dropped from it unprocessed stop counting as handed out at
once, never acked, and their offsets are not committed past.

No broker: a real streamapp app that never starts; its topic channel's queue is filled by hand
with events as the hand-out puts them there (tracked, one channel reference each). Every test
keeps its own references to the records, as the fetch loop's last record is kept: without the
fix they stayed in the consumer's weak set of unacked records for good.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
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


# Fix 27: a clear while the flow runs on (nothing seeks a partition kept flowing) sends each
# kept partition back to its first record dropped, and the ledger lets those out once more.


def _kept(app: Any) -> Any:
    """The app's consumer, with ``TP0`` assigned and the seeks of its fetch loop recorded."""
    consumer = app.consumer
    consumer.assignment = lambda: {TP0}
    sought: list[dict[TP, int]] = []

    async def seek_back(offsets: dict[TP, int]) -> None:
        sought.append(dict(offsets))

    async def getmany(active: set[TP] | None, timeout: float) -> dict[TP, list[Any]]:
        return {}

    consumer._thread = SimpleNamespace(
        seek_back=seek_back, getmany=getmany, positions_after_fetch={}
    )
    consumer.sought = sought
    return consumer


def _fetched(app: Any, offset: int) -> Any:
    return ConsumerMessage(
        TOPIC, 0, offset, 0.0, 0, [], b"k", b"v", None, generation_id=app.consumer_generation_id
    )


def _admitted(app: Any, queue: Any, offset: int) -> Any:
    """A record through the hand-out's ledger, then queued as the hand-out queues it."""
    assert app.consumer._admit(_fetched(app, offset))
    return _handed_out(app, queue, offset)


async def test_a_clear_while_the_flow_runs_sends_a_kept_partition_back(tmp_path: Path) -> None:
    app = _app(tmp_path)
    consumer = _kept(app)
    queue = app.stream(app.topic(TOPIC, partitions=1)).channel.queue
    events = [_admitted(app, queue, offset) for offset in range(5)]
    for _ in range(2):  # the agent processed 0 and 1
        queue.get_nowait().message.ack(consumer)
    # An incremental rebalance's overtaken pass resumed the flow, which was never suspended:
    # Faust's resume empties the queues (2, 3, 4 dropped).
    app.flow_control.resume()
    assert queue.empty() and set(consumer.unacked) == set()
    assert not any(e.message.acked for e in events[2:])
    # The rest of the fetch loop's round waits: it is read again behind them.
    assert not consumer._admit(_fetched(app, 5))
    assert consumer.sought == []
    # The next round begins at the first dropped record, read mark included.
    consumer._read_offset[TP0] = 5
    await consumer._getmany({TP0}, 1.0)
    assert consumer.sought == [{TP0: 2}]
    assert consumer._read_offset[TP0] == 2
    again = [_fetched(app, offset) for offset in range(2, 7)]
    assert [consumer._admit(m) for m in again] == [True] * 5
    for message in again:
        message.tracked = True
        consumer.track_message(message)
        message.ack(consumer)
    # Each offset acked once, and the commit reaches the end.
    assert _committable(consumer) == {TP0: 7}
    # Sought once only.
    await consumer._getmany({TP0}, 1.0)
    assert consumer.sought == [{TP0: 2}]


async def test_a_seek_back_cut_short_is_asked_again(tmp_path: Path) -> None:
    # The fetch loop's task cancelled while its seek waited: the ledger still holds the
    # partition for its dropped records, so the seek must come at the next round.
    app = _app(tmp_path)
    consumer = _kept(app)
    queue = app.stream(app.topic(TOPIC, partitions=1)).channel.queue
    _admitted(app, queue, 0)
    app.flow_control.clear()

    async def cancelled(offsets: dict[TP, int]) -> None:
        raise asyncio.CancelledError

    seek_back = consumer._thread.seek_back
    consumer._thread.seek_back = cancelled
    with pytest.raises(asyncio.CancelledError):
        await consumer._getmany({TP0}, 1.0)
    consumer._thread.seek_back = seek_back
    await consumer._getmany({TP0}, 1.0)
    assert consumer.sought == [{TP0: 0}]


async def test_a_clear_while_the_flow_is_suspended_seeks_nothing(tmp_path: Path) -> None:
    # A stop (the next owner reads on from the committed offset) and an eager revocation (its
    # recovery seeks every partition to its committed offset) suspend the flow first.
    app = _app(tmp_path)
    consumer = _kept(app)
    queue = app.stream(app.topic(TOPIC, partitions=1)).channel.queue
    _admitted(app, queue, 0)
    app.flow_control.suspend()
    app.flow_control.clear()
    _admitted(app, queue, 1)
    app.flow_control.resume()  # the eager recovery's resume, from a suspended flow
    assert queue.empty() and set(consumer.unacked) == set()
    assert consumer._dropped_seek_back == {}
    assert not consumer._hand_out_ledger.awaiting_dropped(TP0)


async def test_a_partition_given_up_or_released_is_not_sought_back(tmp_path: Path) -> None:
    app = _app(tmp_path)
    consumer = _kept(app)
    queue = app.stream(app.topic(TOPIC, partitions=1)).channel.queue
    # Being given up (an incremental rebalance lost it): its next owner reads it from the
    # offset committed as it is given up.
    _admitted(app, queue, 0)
    consumer._giving_up = {TP0}
    app.flow_control.clear()
    assert consumer._dropped_seek_back == {}
    consumer._giving_up = set()
    # Released between the clear and the fetch loop's next round: the seek is the consumer
    # thread's to refuse (fix 7), and Faust's read mark, forgotten, stays so.
    _admitted(app, queue, 1)
    app.flow_control.clear()
    assert consumer._dropped_seek_back == {TP0: 1}
    consumer.assignment = lambda: set()
    consumer._read_offset.pop(TP0, None)
    await consumer._getmany({TP0}, 1.0)
    assert TP0 not in consumer._read_offset
    consumer._hand_out_ledger.forget([TP0])  # as its revocation does
    # Not assigned at all when its records were dropped.
    _admitted(app, queue, 2)
    app.flow_control.clear()
    assert consumer._dropped_seek_back == {}
