"""A round's records of a batch topic handed out a partition at a time (transport fix 28,
faust_compat.partition_hand_out).

No broker: a real streamapp consumer and conductor of an app that never starts, a real topic and
its queue, and Faust's own fetch loop (``Consumer._drain_messages``) over a consumer thread that
returns rounds of records given here. Every case runs twice, with the partition hand-out and
without it (the record-by-record path it replaces), and what the streams, the ledger, the read
marks, the gaps, the flow control and the monitor end up with must be the same; the hand-out
must have taken the records it can take, and nothing else. Each case where it must not take a
record also asks it directly: it does nothing, and leaves that record and the rest of its
partition's round to Faust's fetch loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord
from faust.types import TP

from streamapp import App
from streamapp.faust_compat import transport
from streamapp.faust_compat.transport import Consumer

TOPIC = "clicks"
OTHER = "views"  # read record by record
TP0, TP1, OTHER0 = TP(TOPIC, 0), TP(TOPIC, 1), TP(OTHER, 0)
HIGHWATER = 1_000

Round = dict[TP, list[Any]]


def _record(tp: TP, offset: int, value: bytes | None = None) -> Any:
    value = value if value is not None else f"{offset}".encode()
    return ConsumerRecord(
        tp.topic, tp.partition, offset, 1_000 + offset, 0, b"k", value, None, 1, len(value), []
    )


def _round(**offsets: Any) -> Round:
    """``tp0=range(..)`` and the like: records with those offsets (value: the offset)."""
    named = {"tp0": TP0, "tp1": TP1, "other0": OTHER0}
    return {
        named[name]: [_record(named[name], o) for o in batch] for name, batch in offsets.items()
    }


class _Thread:
    """The consumer thread as the fetch loop sees it: each fetch returns the next round; once
    they are all out, the fetch loop is told to stop."""

    #: Where each fetch left the partitions (transport fix 7): none here.
    positions_after_fetch: dict[TP, int] = {}

    def __init__(self, rounds: list[Round], fetcher: Any, on_fetch: Callable[[], None]) -> None:
        self.rounds = list(rounds)
        self.fetcher = fetcher
        self.on_fetch = on_fetch

    async def getmany(self, active: set[TP] | None, timeout: float) -> Round:
        self.on_fetch()
        if not self.rounds:
            self.fetcher._stopped.set()
            return {}
        return self.rounds.pop(0)

    def highwater(self, tp: TP) -> int:
        return HIGHWATER

    def assignment(self) -> set[TP]:
        return {TP0, TP1, OTHER0}

    async def seek_back(self, offsets: dict[TP, int]) -> None:
        raise AssertionError(f"no partition here is sent back: {offsets}")


class _World:
    """A consumer ready for Faust's fetch loop: ``clicks`` (partitions 0 and 1) read by a batch
    agent's channel, ``views`` by a record-at-a-time one."""

    def __init__(self, tmp_path: Path, *, partition_hand_out: bool, **conf: Any) -> None:
        app = App("sa-partition-hand-out", num_standby_replicas=0, datadir=str(tmp_path), **conf)
        app.flow_control.resume()
        self.app = app
        consumer = app.consumer
        assert isinstance(consumer, Consumer)
        self.consumer = consumer
        conductor = app.topics
        raw = {"key_serializer": "raw", "value_serializer": "raw"}
        # Each an agent's channel: the iterator clone of its topic, whose queue the agent reads.
        self.clicks = aiter(app.topic(TOPIC, key_type=str, value_type=None, **raw))
        self.clicks_json = aiter(
            app.topic(TOPIC, key_type=str, value_type=int, value_serializer="json")
        )
        self.views = aiter(app.topic(OTHER, key_type=str, value_type=bytes, **raw))
        app.sensors.add(app.monitor)  # as a started app has it: sees each record tracked
        # As the conductor indexes the assigned partitions of the agents' topics.
        for tp in (TP0, TP1):
            conductor._tp_index[tp].add(self.clicks)
        conductor._tp_index[OTHER0].add(self.views)
        conductor._acking_topics.update({TOPIC, OTHER})
        conductor._update_callback_map()
        consumer.hand_out_in_batches([TOPIC])
        consumer._active_partitions = {TP0, TP1, OTHER0}
        self.hand_out = consumer._partition_hand_out
        if not partition_hand_out:  # the record-by-record path, as before fix 28
            consumer._partition_hand_out = lambda records, active: records  # type: ignore[assignment]
        self.wait_first_calls = 0
        wait_first = consumer.wait_first

        async def counted(*coros: Any, timeout: Any = None) -> Any:
            self.wait_first_calls += 1
            return await wait_first(*coros, timeout=timeout)

        consumer.wait_first = counted  # type: ignore[method-assign]
        self.on_fetch: Callable[[], None] = lambda: None
        consumer._thread = _Thread([], SimpleNamespace(_stopped=asyncio.Event()), lambda: None)

    def json_values(self) -> None:
        """``clicks`` decoded as json (so that a record can fail to decode)."""
        for tp in (TP0, TP1):
            self.app.topics._tp_index[tp].clear()
            self.app.topics._tp_index[tp].add(self.clicks_json)
        self.clicks = self.clicks_json
        self.app.topics._update_callback_map()

    async def fetch_loop(self, rounds: list[Round]) -> None:
        """Faust's fetch loop over ``rounds``, until they are all handed out."""
        fetcher = SimpleNamespace(_stopped=asyncio.Event())
        self.consumer._thread = _Thread(rounds, fetcher, lambda: self.on_fetch())
        await asyncio.wait_for(self.consumer._drain_messages(fetcher), 30)

    def queued(self, channel: Any) -> list[tuple[TP, int, Any]]:
        """What ``channel``'s queue holds, taken off it: (partition, offset, value)."""
        out = []
        while not channel.queue.empty():
            event = channel.queue.get_nowait()
            out.append((event.message.tp, event.message.offset, event.value))
        return out

    def state(self, taken: list[Any] = ()) -> dict[str, Any]:  # type: ignore[assignment]
        """Everything the hand-out may touch, in a form to compare. The streams' records per
        partition (their order across partitions is `order`'s: it may differ), ``taken``
        (events an agent took) first."""
        consumer, monitor = self.consumer, self.app.monitor
        # Before the queues are emptied: the consumer holds its unacked records weakly, and a
        # queue's pressure drops as it empties (the partition is made active again).
        state: dict[str, Any] = {
            "unacked": sorted((m.tp, m.offset, m.refcount) for m in consumer.unacked),
            "read": {tp: o for tp, o in consumer._read_offset.items() if o is not None},
            "ledger": dict(consumer._hand_out_ledger._next),
            "gaps": {
                tp: sorted((i.begin, i.end) for i in g) for tp, g in consumer._gap.items() if g
            },
            "active": sorted(consumer._active_partitions),
            "buffered": sorted(consumer._buffered_partitions),
            "ends": dict(monitor.tp_end_offsets),
            "received": monitor.messages_received_total,
            "at_once": consumer.handed_out_at_once,
        }
        events = [(e.message.tp, e.message.offset, e.value) for e in taken]
        self.order = events + self.queued(self.clicks)
        per_tp: dict[TP, list[tuple[int, Any]]] = {}
        for tp, offset, value in self.order + self.queued(self.views):
            per_tp.setdefault(tp, []).append((offset, value))
        state["streams"] = per_tp
        return state


async def _both(
    tmp_path: Path,
    rounds: list[Round],
    prepare: Callable[[_World], None] = lambda w: None,
    **conf: Any,
) -> tuple[dict[str, Any], dict[str, Any], _World]:
    """The same rounds through the fetch loop with and without the partition hand-out."""
    states = []
    for on in (True, False):
        world = _World(tmp_path / str(on), partition_hand_out=on, **conf)
        prepare(world)
        await world.fetch_loop([{tp: list(batch) for tp, batch in r.items()} for r in rounds])
        states.append(world.state())
        if on:
            with_it = world
    return states[0], states[1], with_it


async def test_a_rounds_batch_records_go_out_a_partition_at_a_time_as_before(
    tmp_path: Path,
) -> None:
    rounds = [
        _round(tp0=range(0, 5), tp1=range(10, 13), other0=range(0, 3)),
        _round(tp0=range(5, 8)),
    ]
    new, old, world = await _both(tmp_path, rounds)
    assert new == old
    # A partition at a time, in the order of their first records' timestamps.
    assert [(tp, o) for tp, o, _ in world.order] == [
        *((TP0, o) for o in range(0, 5)),
        *((TP1, o) for o in range(10, 13)),
        *((TP0, o) for o in range(5, 8)),
    ]
    assert new["streams"][TP0][0] == (0, b"0")
    assert new["read"] == {TP0: 7, TP1: 12, OTHER0: 2}
    assert new["ends"] == {TP0: HIGHWATER, TP1: HIGHWATER, OTHER0: HIGHWATER}
    assert new["unacked"] == sorted(
        [(TP0, o, 1) for o in range(8)]
        + [(TP1, o, 1) for o in range(10, 13)]
        + [(OTHER0, o, 1) for o in range(3)]
    )
    # The batch topic's 11 records without Faust's per-record hand-out; the other topic's 3 by it.
    assert world.hand_out.handed_out == 11 and world.hand_out.cut_short == 0
    assert world.wait_first_calls == 3


async def test_partitions_go_out_in_the_order_of_their_first_records_timestamps(
    tmp_path: Path,
) -> None:
    # Fetched TP0 first, but TP1's first record is older: TP1's batch comes first, as the
    # scheduler would have put its first record first.
    new, old, world = await _both(tmp_path, [_round(tp0=range(5, 8), tp1=range(0, 3))])
    assert new == old
    assert [(tp, o) for tp, o, _ in world.order] == [
        (TP1, 0),
        (TP1, 1),
        (TP1, 2),
        (TP0, 5),
        (TP0, 6),
        (TP0, 7),
    ]


async def test_records_refused_by_the_ledger_move_the_read_mark_and_nothing_else(
    tmp_path: Path,
) -> None:
    def handed_out_before(world: _World) -> None:
        for offset in range(0, 3):  # as if handed out already in this generation
            assert world.consumer._admit(
                SimpleNamespace(
                    tp=TP0,
                    topic=TOPIC,
                    partition=0,
                    offset=offset,
                    generation_id=world.app.consumer_generation_id,
                )
            )

    new, old, world = await _both(tmp_path, [_round(tp0=range(0, 6))], handed_out_before)
    assert new == old
    assert [o for o, _ in new["streams"][TP0]] == [3, 4, 5]
    assert new["read"] == {TP0: 5}
    assert world.hand_out.handed_out == 6 and world.wait_first_calls == 0


@pytest.mark.parametrize(
    ("case", "in_one_call"),
    [
        ("a gap (transaction markers)", 3 + 2),
        ("below the read mark", 0 + 2),
        ("an undecodable record", 2 + 2),
        ("the queue fills", 3 + 0),
        ("records in hand at the limit", 3 + 0),
    ],
)
async def test_a_record_faust_handles_otherwise_leaves_the_rest_of_its_partition_to_faust(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, in_one_call: int
) -> None:
    """``in_one_call``: TP0's records up to that record, and TP1's two (unless the queue or the
    limit stops those as well)."""
    offsets = [0, 1, 2, 5, 6] if case.startswith("a gap") else list(range(6))
    conf: dict[str, Any] = {}
    if case == "the queue fills":
        conf["stream_buffer_maxsize"] = 3
    elif case == "records in hand at the limit":
        monkeypatch.setattr(transport, "BATCH_AHEAD_LIMIT", 3)  # the per-record path's limit
    states = []
    for on in (True, False):
        world = _World(tmp_path / str(on), partition_hand_out=on, **conf)
        tp0 = [_record(TP0, o) for o in offsets]
        taken: list[Any] = []
        agent = None
        if case == "below the read mark":
            world.consumer._read_offset[TP0] = 2  # a seek back moved the mark (fix 27)
        elif case == "an undecodable record":
            world.json_values()
            tp0 = [_record(TP0, o, b"not json" if o == 2 else b"7") for o in offsets]
        elif case == "records in hand at the limit":
            world.hand_out._ahead_limit = 3
        elif case == "the queue fills":
            # An agent takes what its queue holds whenever the fetch loop waits for room.
            async def take(queue: Any = world.clicks.queue, taken: list[Any] = taken) -> None:
                while True:
                    taken.append(await queue.get())

            agent = asyncio.ensure_future(take())
        await world.fetch_loop([{TP0: tp0, TP1: [_record(TP1, o) for o in (0, 1)]}])
        if agent is not None:
            while not world.clicks.queue.empty():  # the agent takes the rest, then waits
                await asyncio.sleep(0)
            await asyncio.sleep(0)
            agent.cancel()
        states.append(world.state(taken))
        if on:
            hand_out = world.hand_out
    new, old = states
    assert new == old
    assert hand_out.handed_out == in_one_call and hand_out.cut_short >= 1
    tp0_out = [o for o, _ in new["streams"][TP0]]
    if case == "below the read mark":
        assert tp0_out == [2, 3, 4, 5]  # 0 and 1 dropped by Faust's loop
    elif case == "a gap (transaction markers)":
        assert tp0_out == offsets and new["gaps"] == {TP0: [(3, 5)]}
    elif case == "an undecodable record":
        assert tp0_out == [0, 1, 3, 4, 5]  # 2 skipped (the bad-record policy's default)
    else:
        assert tp0_out == offsets


async def test_the_queue_filling_calls_the_pressure_callbacks_as_faust_would(
    tmp_path: Path,
) -> None:
    # 10 records into a queue of 12 whose pressure mark is at 9 (mode's ratio): the 10th put
    # finds it under pressure, and TP0 is set aside for a full queue, by either path.
    new, old, world = await _both(tmp_path, [_round(tp0=range(0, 10))], stream_buffer_maxsize=12)
    assert new == old
    assert new["buffered"] == [TP0] and TP0 not in new["active"]
    assert world.hand_out.handed_out == 10


@pytest.mark.parametrize(
    "case",
    [
        "commit holds the hand-out",
        "partition given up",
        "flow control suspended",
        "consumer flow stopped",
        "conductor locked",
        "fetch loop commits first",
        "generation moved on",
        "not active",
    ],
)
async def test_the_hand_out_does_nothing_when_faust_would_wait_or_do_otherwise(
    tmp_path: Path, case: str
) -> None:
    world = _World(tmp_path, partition_hand_out=True)
    consumer, app = world.consumer, world.app
    if case == "commit holds the hand-out":
        consumer._handing_out.clear()
    elif case == "partition given up":
        consumer._giving_up.add(TP0)
    elif case == "flow control suspended":
        app.flow_control.suspend()
    elif case == "consumer flow stopped":
        consumer.stop_flow()
    elif case == "conductor locked":
        await app.topics._tp_to_callback_lock.acquire()
    elif case == "fetch loop commits first":
        consumer._n_acked = consumer._commit_every
    elif case == "not active":
        consumer._active_partitions = {TP1}
    records = _round(tp0=range(0, 4))
    if case == "generation moved on":
        # The consumer thread assigns a new generation as the first record goes out.
        track = consumer.track_message

        def track_then_rebalance(message: Any) -> None:
            track(message)
            app.consumer_generation_id += 1

        consumer.track_message = track_then_rebalance  # type: ignore[method-assign]
    left = world.hand_out(records, consumer._active_partitions)
    if case == "generation moved on":
        # Faust's getmany drops the rest of a fetch then (its seek brings it back).
        assert left == {} and [o for _, o, _ in world.queued(world.clicks)] == [0]
        return
    assert left == records and left[TP0] is records[TP0]
    assert world.clicks.queue.qsize() == 0 and not consumer.unacked
    assert consumer._read_offset.get(TP0) is None and world.hand_out.handed_out == 0
    # The ledger still admits the first record for Faust's path.
    message = consumer._to_message(TP0, records[TP0][0])
    assert consumer._admit(message)


async def test_a_commit_holding_the_hand_out_holds_the_round_until_it_ends(
    tmp_path: Path,
) -> None:
    """Under exactly_once a commit stops the hand-out until what was handed out is processed:
    a round fetched meanwhile waits record by record, then goes on in order."""
    for on in (True, False):
        world = _World(tmp_path / str(on), partition_hand_out=on)
        consumer = world.consumer
        fetched = asyncio.Event()

        def commit_begins(world: _World = world, fetched: asyncio.Event = fetched) -> None:
            world.consumer._handing_out.clear()
            fetched.set()

        world.on_fetch = commit_begins
        loop = asyncio.ensure_future(world.fetch_loop([_round(tp0=range(0, 4), tp1=range(0, 2))]))
        await fetched.wait()
        for _ in range(20):
            await asyncio.sleep(0)
        assert world.clicks.queue.qsize() == 0 and not consumer.unacked  # held by the commit
        world.on_fetch = lambda: None
        consumer._handing_out.set()  # the commit ends
        await loop
        # Record by record, in the scheduler's order (by timestamp; ties in fetch order).
        assert [(tp, o) for tp, o, _ in world.queued(world.clicks)] == [
            (TP0, 0),
            (TP1, 0),
            (TP0, 1),
            (TP1, 1),
            (TP0, 2),
            (TP0, 3),
        ]
        assert consumer._read_offset[TP0] == 3 and consumer._read_offset[TP1] == 1
        assert world.hand_out.handed_out == 0  # the whole round took the per-record path


async def test_a_partition_given_up_during_the_fetch_is_not_handed_out(tmp_path: Path) -> None:
    def give_up_during_the_fetch(world: _World) -> None:
        world.on_fetch = lambda: world.consumer._giving_up.add(TP1)

    new, old, world = await _both(
        tmp_path, [_round(tp0=range(0, 3), tp1=range(0, 3))], give_up_during_the_fetch
    )
    assert new == old
    assert set(new["streams"]) == {TP0}
    assert all(tp == TP0 for tp, _, _ in new["unacked"])
    assert world.hand_out.handed_out == 3 and world.hand_out.cut_short == 1
