"""streamapp.batches: an agent's records as batches, one per partition, acked once each.

No broker: a real streamapp app that never starts; its topic channel's queue is filled by hand
with events as Faust's conductor would put them there (tracked, as streamapp's hand-out does).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.events import Event
from faust.types import TP
from faust.types.tuples import ConsumerMessage
from mode.utils.queues import FlowControlEvent, ThrowableQueue

from streamapp import App
from streamapp.batches import Batch, BatchAbandoned, _take, batches, by_partition
from streamapp.runtime.consumer import Consumer

TOPIC = "sa-batches-in"


def _app(tmp_path: Path) -> Any:
    app = App("sa-batches", num_standby_replicas=0, datadir=str(tmp_path))
    app.flow_control.resume()
    app.topics.acking_topics.add(TOPIC)  # as the conductor marks an agent's source topic
    return app


def _event(app: Any, partition: int, offset: int, *, generation: int | None = None) -> Any:
    message = ConsumerMessage(
        TOPIC,
        partition,
        offset,
        0.0,
        0,
        [],
        b"k%d" % offset,
        b"%d" % offset,
        None,
        generation_id=app.consumer_generation_id if generation is None else generation,
    )
    message.incref()  # one channel reads it, as the conductor counts
    return Event(app, message.key, message.value, [], message)


def _committable(consumer: Any) -> dict[TP, int]:
    return dict(consumer.ledger.committable())


def _hand_out(consumer: Any, message: Any) -> None:
    """As the fetch loop hands a record to the conductor, and a stream takes it."""
    consumer.ledger.handed_out(message.tp, message.offset, message)
    consumer.track_message(message)


def test_events_are_cut_per_partition_in_their_order(tmp_path: Path) -> None:
    app = _app(tmp_path)
    events = [_event(app, p, o) for p, o in [(0, 5), (1, 7), (0, 6), (2, 1), (1, 8), (0, 7)]]
    cut = by_partition(events)
    assert [b.tp for b in cut] == [TP(TOPIC, 0), TP(TOPIC, 1), TP(TOPIC, 2)]
    assert [[e.message.offset for e in b] for b in cut] == [[5, 6, 7], [7, 8], [1]]
    assert (cut[0].first_offset, cut[0].last_offset, len(cut[0])) == (5, 7, 3)
    assert cut[1].items() == [(b"k7", b"7"), (b"k8", b"8")]


def test_a_batch_is_acked_once_and_commits_its_last_offset_plus_one(tmp_path: Path) -> None:
    app = _app(tmp_path)
    consumer = app.consumer
    events = [_event(app, 0, offset) for offset in range(10)]
    shared = _event(app, 1, 0)
    shared.message.incref()  # read by a second stream too
    for event in [*events, shared]:
        _hand_out(consumer, event.message)
    final = consumer.ack_batch([e.message for e in events] + [shared.message])
    assert [m.offset for m in final] == list(range(10))  # the shared one is not done yet
    assert all(e.message.acked for e in events) and not shared.message.acked
    assert _committable(consumer) == {TP(TOPIC, 0): 10}
    assert set(consumer.unacked) == {shared.message}
    assert consumer.ack_batch([e.message for e in events]) == []  # acked once only
    assert [m.offset for m in consumer.ack_batch([shared.message])] == [0]


async def test_an_agent_gets_batches_acked_when_it_asks_for_the_next(tmp_path: Path) -> None:
    app = _app(tmp_path)
    consumer = app.consumer
    assert isinstance(consumer, Consumer)
    topic = app.topic(TOPIC, key_type=bytes, value_type=bytes, partitions=3)
    stream = app.stream(topic)
    queue = stream.channel.queue
    first = [_event(app, p, o) for p, o in [(0, 0), (1, 0), (0, 1), (0, 2), (1, 1)]]
    stale = _event(app, 2, 0, generation=app.consumer_generation_id - 1)
    for event in [*first, stale]:
        _hand_out(consumer, event.message)
        queue.put_nowait(event)
    seen: list[tuple[Batch, Any, list[bool]]] = []
    iterator = batches(stream, max_records=100).__aiter__()
    for _ in range(2):
        batch = await iterator.__anext__()
        # Acked only once the agent asks for the next one; the stale one unprocessed.
        seen.append((batch, faust.current_event(), [e.message.acked for e in first]))
    assert [[e.message.offset for e in b] for b, _, _ in seen] == [[0, 1, 2], [0, 1]]
    assert seen[0][1] is first[3] and seen[1][1] is first[4]  # the batch's last event
    assert seen[0][2] == [False] * 5
    assert seen[1][2] == [True, False, True, True, False]
    assert stale.message.acked
    more = _event(app, 1, 2)
    _hand_out(consumer, more.message)
    queue.put_nowait(more)
    batch = await iterator.__anext__()
    assert [e.message.offset for e in batch] == [2]
    assert all(e.message.acked for e in first) and not more.message.acked
    crashed: list[BaseException] = []

    async def crash(reason: BaseException) -> None:
        crashed.append(reason)

    app.crash = crash
    await iterator.aclose()  # left unfinished while the worker runs: not acked, and it stops
    await asyncio.sleep(0)
    assert not more.message.acked
    assert [type(reason) for reason in crashed] == [BatchAbandoned]
    assert "sa-batches-in[1] (offsets 2 to 2)" in str(crashed[0])
    assert _committable(consumer) == {TP(TOPIC, 0): 3, TP(TOPIC, 1): 2, TP(TOPIC, 2): 1}


async def test_a_batch_waits_within_seconds_for_more_records(tmp_path: Path) -> None:
    app = _app(tmp_path)
    topic = app.topic(TOPIC, key_type=bytes, value_type=bytes, partitions=1)
    stream = app.stream(topic)
    queue = stream.channel.queue
    queue.put_nowait(_event(app, 0, 0))

    async def later() -> None:
        await asyncio.sleep(0)
        queue.put_nowait(_event(app, 0, 1))

    putting = asyncio.ensure_future(later())
    iterator = batches(stream, max_records=2, within=60.0).__aiter__()
    batch = await iterator.__anext__()
    await putting
    assert [e.message.offset for e in batch] == [0, 1]  # full before the 60 s were up
    await iterator.aclose()


async def test_a_cancelled_actor_ends_the_batches_without_an_error(tmp_path: Path) -> None:
    # Faust's Actor.cancel (worker shutdown, revocation) throws StopAsyncIteration into the
    # channel's queue; the agent's `async for` must end there, not raise a RuntimeError.
    app = _app(tmp_path)
    topic = app.topic(TOPIC, key_type=bytes, value_type=bytes, partitions=1)
    stream = app.stream(topic)
    iterator = batches(stream, max_records=10).__aiter__()
    waiting = asyncio.ensure_future(iterator.__anext__())
    await asyncio.sleep(0)
    await stream.channel.throw(StopAsyncIteration())  # what Actor.cancel does, in sync form
    with pytest.raises(StopAsyncIteration):
        await waiting


def test_max_records_must_be_positive(tmp_path: Path) -> None:
    stream = _app(tmp_path).stream(faust.App("x").topic(TOPIC))
    with pytest.raises(ValueError, match="max_records"):
        asyncio.run(batches(stream, max_records=0).__anext__())


class _CountingQueue(ThrowableQueue):  # type: ignore[type-arg]
    """mode's queue of a channel, counting the agent's tests of ``empty()``."""

    def __init__(self) -> None:
        super().__init__(flow_control=FlowControlEvent(initially_suspended=False))
        self.empty_calls = 0

    def empty(self) -> bool:
        self.empty_calls += 1
        return bool(super().empty())


async def test_a_wake_up_takes_the_queue_up_to_max_records_with_one_count() -> None:
    queue = _CountingQueue()
    for item in range(250):
        queue.put_nowait(item)
    taken = await _take(queue, 100, None)
    assert taken == list(range(100))  # in order, up to max_records
    assert queue.qsize() == 150
    # asyncio's get_nowait tests empty() once per item; _take adds one before the count and
    # one after, not one per record (docs/performance.md).
    assert queue.empty_calls <= len(taken) + 2
    assert await _take(queue, 1000, None) == list(range(100, 250))


async def test_an_error_thrown_into_the_queue_is_raised_after_what_it_holds() -> None:
    queue = _CountingQueue()
    queue.put_nowait(1)
    queue.put_nowait(2)
    await queue.throw(RuntimeError("thrown"))
    with pytest.raises(RuntimeError, match="thrown"):  # as ThrowableQueue.get_nowait raises it
        await _take(queue, 10, None)
    queue = _CountingQueue()
    await queue.throw(RuntimeError("alone"))
    with pytest.raises(RuntimeError, match="alone"):
        await _take(queue, 10, None)
