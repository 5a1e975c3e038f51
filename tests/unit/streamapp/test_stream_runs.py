"""streamapp's Stream: an agent's records taken a run at a time, given out one at a time, with
Faust's current event per record, and acked as the run ends.

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

from streamapp import App
from streamapp.runtime import stream_runs
from streamapp.runtime.consumer import Consumer
from streamapp.sending import batch_changelog
from streamapp.streams.stream import Stream

TOPIC = "sa-runs-in"


def _app(tmp_path: Path, *, in_worker: bool = False, **options: Any) -> Any:
    app = App("sa-runs", num_standby_replicas=0, datadir=str(tmp_path), **options)
    app.in_worker = in_worker  # Faust runs transactions in a worker only
    app.flow_control.resume()
    app.topics.acking_topics.add(TOPIC)  # as the conductor marks an agent's source topic
    assert isinstance(app.consumer, Consumer)
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


def _hand_out(app: Any, queue: Any, events: list[Any]) -> None:
    """As the fetch loop hands records to the conductor, which puts them in the queue."""
    consumer = app.consumer
    for event in events:
        message = event.message
        consumer.ledger.handed_out(message.tp, message.offset, message)
        message.tracked = True
        consumer.track_message(message)
        queue.put_nowait(event)


def _stream(app: Any) -> Any:
    topic = app.topic(TOPIC, key_type=bytes, value_type=bytes, partitions=3)
    stream = app.stream(topic)
    assert isinstance(stream, Stream)
    return stream


async def _started_stream(app: Any) -> Any:
    """An agent's stream: its actor starts it, not its iteration (which would stop it as it
    ends)."""
    stream = _stream(app)
    await stream.maybe_start()
    return stream


async def test_a_run_gives_one_event_at_a_time_and_acks_them_as_it_ends(tmp_path: Path) -> None:
    app = _app(tmp_path)
    stream = await _started_stream(app)
    events = [_event(app, p, o) for p, o in [(0, 0), (1, 0), (0, 1), (2, 0)]]
    _hand_out(app, stream.channel.queue, events)
    assert stream.runs_apply()
    seen: list[tuple[Any, Any, Any, list[bool]]] = []
    iterator = stream.items().__aiter__()
    for _ in events:
        key, value = await iterator.__anext__()
        current = stream.current_event
        seen.append(
            ((key, value), current, faust.current_event(), [e.message.acked for e in events])
        )
        assert batch_changelog.current() is not None  # its partition's changelog of the run
        assert batch_changelog.current().source == current.message.tp
    # In the queue's order, each event the current one while the agent holds it.
    assert [s[0] for s in seen] == [(e.key, e.value) for e in events]
    assert [s[1] for s in seen] == events and [s[2] for s in seen] == events
    # A partition's records are acked once its last record in the run is processed: not one
    # by one, and not before its changelog records are sent.
    assert [acked for *_, acked in seen] == [
        [False] * 4,
        [False] * 4,
        [False, True, False, False],
        [True, True, True, False],
    ]
    assert stream.events_total == 4
    more = [_event(app, 0, 2)]
    _hand_out(app, stream.channel.queue, more)
    assert await iterator.__anext__() == (b"k2", b"2")
    assert all(e.message.acked for e in events) and not more[0].message.acked
    assert app.consumer.ledger.committable() == {TP(TOPIC, 0): 2, TP(TOPIC, 1): 1, TP(TOPIC, 2): 1}
    await iterator.aclose()  # the agent leaves: the record it held is acked, as Faust does
    assert more[0].message.acked and stream.current_event is None


async def test_stale_records_are_acked_unprocessed_as_their_turn_comes(tmp_path: Path) -> None:
    app = _app(tmp_path)
    stream = await _started_stream(app)
    stale = _event(app, 1, 0, generation=app.consumer_generation_id - 1)
    fresh = [_event(app, 0, 0), _event(app, 0, 1)]
    _hand_out(app, stream.channel.queue, [fresh[0], stale, fresh[1]])
    iterator = stream.__aiter__()
    assert await iterator.__anext__() == b"0"
    assert await iterator.__anext__() == b"1"  # the stale one skipped
    assert stream.events_total == 2
    more = [_event(app, 0, 2)]
    _hand_out(app, stream.channel.queue, more)
    assert await iterator.__anext__() == b"2"
    assert stale.message.acked and all(e.message.acked for e in fresh)
    await iterator.aclose()


async def test_a_run_stopped_by_the_flow_drops_its_rest_unacked(tmp_path: Path) -> None:
    # The worker stops: Faust suspends the flow and clears the queues. The rest of a run is
    # dropped as the queue's records are: not acked (no commit covers it), no stop waits for it.
    app = _app(tmp_path)
    stream = await _started_stream(app)
    events = [_event(app, 0, o) for o in range(4)]
    _hand_out(app, stream.channel.queue, events)
    iterator = stream.__aiter__()
    assert await iterator.__anext__() == b"0"
    app.flow_control.suspend()
    waiting = asyncio.ensure_future(iterator.__anext__())
    await asyncio.sleep(0.01)
    assert not waiting.done()  # the run ended: the agent waits for more
    consumer = app.consumer
    assert events[0].message.acked
    assert not any(e.message.acked for e in events[1:])
    assert not any(e.message in consumer.unacked for e in events[1:])
    assert consumer.ledger.committable() == {TP(TOPIC, 0): 1}
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)


async def test_an_agent_that_leaves_a_run_gets_the_rest_next_time(tmp_path: Path) -> None:
    # The agent raised over the second record (bad_record_policy skips it, and the agent is
    # called again on its stream): what the run did not give out comes first, in order.
    app = _app(tmp_path)
    stream = await _started_stream(app)
    events = [_event(app, 0, o) for o in range(5)]
    _hand_out(app, stream.channel.queue, events)

    async def agent(stop_at: int) -> None:
        iteration = stream.events()
        try:
            async for event in iteration:
                if event.message.offset == stop_at:
                    raise ValueError("bad record")
        finally:
            # What asyncio's finalizer does with the iteration the agent left: close it.
            await iteration.aclose()

    with pytest.raises(ValueError):
        await agent(1)
    assert [e.message.acked for e in events] == [True, True, False, False, False]
    assert stream.current_event is None
    later = [_event(app, 0, 5)]
    _hand_out(app, stream.channel.queue, later)
    with pytest.raises(ValueError):
        await agent(4)  # offsets 2, 3 and 4 come first, then 5 (not reached)
    assert all(e.message.acked for e in events) and not later[0].message.acked


async def test_an_agent_called_again_after_a_skipped_record_gets_the_rest_of_its_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # As in a worker: Faust's actor does not start the agent's stream, its first iteration
    # does, and stops it as it ends. The agent raises over a record, bad_record_policy skips
    # it, and the guard calls the agent again on its stream, which gives the rest of the run:
    # the iteration's own stop must not release them as a worker's stop would (they would
    # never be processed, acked or fetched again, and the agent would wait for more).
    app = _app(tmp_path, bad_record_policy="skip")
    topic = app.topic(TOPIC, key_type=bytes, value_type=bytes, partitions=3)
    events = [_event(app, p, o) for o in range(4) for p in (0, 1)]
    poison = events[2]  # partition 0, offset 1
    last = events[-1]
    seen: list[Any] = []
    all_seen = asyncio.Event()

    @app.agent(topic)
    async def agent(stream: Any) -> None:
        async for event in stream.events():
            seen.append(event)
            if event is last:
                all_seen.set()
            if event is poison:
                raise ValueError("poison")

    stream = agent.stream()
    assert not stream.started  # as Faust's actor leaves it
    _hand_out(app, stream.channel.queue, events)
    task = asyncio.ensure_future(agent.fun(stream))
    try:
        await asyncio.wait_for(all_seen.wait(), 10.0)  # a guard against a hang, not a timing
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert seen == events  # each once, in order, the rest of the run after the skipped one
    assert all(e.message.acked for e in events)
    assert app.consumer.ledger.committable() == {TP(TOPIC, 0): 4, TP(TOPIC, 1): 4}
    assert [r.getMessage() for r in caplog.records if "skipped record" in r.getMessage()] == [
        f"streamapp: skipped record {TOPIC}[0]@1: agent {agent.name} raised ValueError: poison "
        "(bad_record_policy=skip)"
    ]


async def test_a_stop_releases_what_the_run_did_not_give_out(tmp_path: Path) -> None:
    app = _app(tmp_path)
    stream = await _started_stream(app)
    events = [_event(app, 0, o) for o in range(3)]
    _hand_out(app, stream.channel.queue, events)
    iterator = stream.__aiter__()
    assert await iterator.__anext__() == b"0"
    await stream.stop()  # closes the iteration (Faust's on_stop)
    consumer = app.consumer
    assert events[0].message.acked
    assert not events[1].message.acked and events[1].message not in consumer.unacked
    assert consumer.ledger.committable() == {TP(TOPIC, 0): 1}


def test_streams_with_processors_or_manual_acks_keep_fausts_iteration(tmp_path: Path) -> None:
    app = _app(tmp_path)
    stream = _stream(app)
    assert stream.runs_apply()
    assert not stream.noack().runs_apply()
    filtered = _stream(app)
    filtered.add_processor(lambda value: value)
    assert not filtered.runs_apply()
    assert not app.stream([1, 2, 3]).runs_apply()


async def test_an_error_thrown_into_the_queue_comes_first_and_loses_nothing(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path)
    queue = _stream(app).channel.queue
    queue.put_nowait(1)
    queue.put_nowait(2)
    await queue.throw(RuntimeError("thrown"))
    taken: list[Any] = []
    with pytest.raises(RuntimeError, match="thrown"):
        await stream_runs.take(queue, 10, taken)
    assert taken == []  # raised before the records, as Faust's iteration raises it
    await stream_runs.take(queue, 10, taken)
    assert taken == [1, 2]


def _on_disk(store: Any, partition: int) -> tuple[dict[bytes, bytes], int | None]:
    """What a store's partition holds in RocksDB (not its pending writes), and its offset."""
    from streamapp.runtime.pending_writes import OFFSET_KEY

    rows = dict(store.handle(partition).items())
    raw = rows.pop(OFFSET_KEY, None)
    return rows, None if raw is None else int(raw)


async def test_a_runs_writes_under_exactly_once_wait_for_their_transactions_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _app(tmp_path, in_worker=True, processing_guarantee="exactly_once")
    table = app.Table("sa-runs-counts", partitions=3, key_type=bytes, value_type=int)
    store = table.data
    assert store.transactional
    changelog = table.changelog_topic.get_topic_name()
    # Each source partition's transaction, and what the run hands to it (no broker here).
    monkeypatch.setattr(
        batch_changelog, "source_transactional_id", lambda app, tp: f"sa-runs-{tp.partition}"
    )
    sent: list[tuple[str | None, list[tuple[str, int, bytes, bytes | None]]]] = []

    async def send(self: batch_changelog.BatchChangelog) -> None:
        records = [(t, p, k, v) for _, t, p, k, v in self.records.values()]
        self.records = {}
        sent.append((self.transactional_id, records))

    monkeypatch.setattr(batch_changelog.BatchChangelog, "send", send)
    stream = await _started_stream(app)
    events = [_event(app, 1, 0), _event(app, 1, 1), _event(app, 2, 2)]
    events[1].key = events[1].message.key = b"k0"  # the first record's key, written again
    _hand_out(app, stream.channel.queue, events)
    iterator = stream.events().__aiter__()
    for _ in events:
        event = await iterator.__anext__()
        table[event.key] = table.get(event.key, 0) + 1
    await iterator.aclose()
    assert all(e.message.acked for e in events)
    # Sent in each source partition's transaction, one record per key (its last write)...
    assert sorted(sent) == [
        ("sa-runs-1", [(changelog, 1, b"k0", b"2")]),
        ("sa-runs-2", [(changelog, 2, b"k2", b"1")]),
    ]
    # ...and stored nowhere yet: the writes wait for those transactions, reads see them.
    assert store.pending_partitions() == {1: {TP(TOPIC, 1)}, 2: {TP(TOPIC, 2)}}
    assert table[b"k0"] == 2 and table[b"k2"] == 1
    assert _on_disk(store, 1) == ({}, None) and _on_disk(store, 2) == ({}, None)
    # The changelog records delivered (Faust's callback), then partition 1's transaction
    # commits: its writes reach RocksDB with the offset in one write batch, 2's still wait.
    app.tables.persist_offset_on_commit(store, TP(changelog, 1), 7)
    app.tables.persist_offset_on_commit(store, TP(changelog, 2), 3)
    app.tables.on_commit({TP(TOPIC, 1): 2})
    assert _on_disk(store, 1) == ({b"k0": b"2"}, 7)
    assert _on_disk(store, 2) == ({}, None)
    assert store.pending_partitions() == {2: {TP(TOPIC, 2)}}
    app.tables.on_commit({TP(TOPIC, 2): 3})
    assert _on_disk(store, 2) == ({b"k2": b"1"}, 3)
    assert store.pending_partitions() == {}
