"""The fetch loop's hand-out of a record without a task per record (faust_compat.eager_hand_out).

A hand-out that waits for nothing finishes in the caller's task, with no task made; one that
waits goes on under mode's ``wait_first``, raced against the flow's suspension as before. No
broker: the consumer is a real streamapp consumer of an app that never starts.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from pathlib import Path
from typing import Any

import pytest
from faust.transport.consumer import Consumer as FaustConsumer
from mode.services import Service

from streamapp import App
from streamapp.faust_compat.eager_hand_out import AHEAD_LIMIT, eager_wait_first, is_coroutine_of
from streamapp.faust_compat.transport import IN_FETCH_LOOP, Consumer

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")


class _Waiter(Service):
    """mode's ``wait_first``, on a service of its own (stopped and crashed never set)."""


def _count_tasks(made: list[Any]) -> Any:
    loop = asyncio.get_running_loop()
    previous = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
        made.append(coro)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    return previous


async def test_a_hand_out_with_nothing_to_wait_for_makes_no_task() -> None:
    done: list[int] = []
    flow = asyncio.Event()

    async def hand_out(offset: int) -> None:
        await asyncio.Lock().acquire()  # free: no suspension, as the conductor's lock
        done.append(offset)

    made: list[Any] = []
    loop = asyncio.get_running_loop()
    previous = _count_tasks(made)
    try:
        for offset in range(3):
            flow_wait = flow.wait()
            result = await eager_wait_first(
                hand_out(offset), flow_wait, may_start=True, wait_first=_Waiter().wait_first
            )
            assert result is None
            assert inspect.getcoroutinestate(flow_wait) == inspect.CORO_CLOSED
    finally:
        loop.set_task_factory(previous)
    assert done == [0, 1, 2]
    assert made == []


async def test_after_a_hand_out_at_once_the_agents_get_their_turn() -> None:
    # An agent takes one record per loop iteration: the fetch loop yields once per record,
    # so it does not run a whole fetch ahead of it.
    flow = asyncio.Event()
    order: list[str] = []

    async def hand_out(offset: int) -> None:
        order.append(f"hand out {offset}")

    async def agent() -> None:
        for offset in range(3):
            order.append(f"process {offset}")
            await asyncio.sleep(0)

    async def fetch_loop() -> None:
        for offset in range(3):
            await eager_wait_first(
                hand_out(offset), flow.wait(), may_start=True, wait_first=_Waiter().wait_first
            )

    await asyncio.gather(fetch_loop(), agent())
    assert order == [
        "hand out 0",
        "process 0",
        "hand out 1",
        "process 1",
        "hand out 2",
        "process 2",
    ]


async def test_a_hand_out_that_waits_finishes_under_wait_first() -> None:
    room = asyncio.Event()
    flow = asyncio.Event()
    steps: list[str] = []

    async def hand_out() -> str:
        steps.append("first step")
        await room.wait()  # a full queue
        steps.append("put")
        return "handed out"

    waiting = asyncio.ensure_future(
        eager_wait_first(hand_out(), flow.wait(), may_start=True, wait_first=_Waiter().wait_first)
    )
    await asyncio.sleep(0)
    assert steps == ["first step"]  # taken at once, in the caller's task
    for _ in range(3):
        await asyncio.sleep(0)
    assert not waiting.done()
    room.set()
    result = await waiting
    assert result is not None and not result.stopped
    assert result.results == ["handed out"]
    assert steps == ["first step", "put"]


async def test_a_suspended_flow_cancels_the_rest_of_a_waiting_hand_out() -> None:
    room = asyncio.Event()
    flow = asyncio.Event()
    steps: list[str] = []

    async def hand_out() -> None:
        steps.append("first step")
        try:
            await room.wait()
            steps.append("put")  # never: the record is not handed out
        except asyncio.CancelledError:
            steps.append("cancelled")
            raise

    waiting = asyncio.ensure_future(
        eager_wait_first(hand_out(), flow.wait(), may_start=True, wait_first=_Waiter().wait_first)
    )
    await asyncio.sleep(0)
    flow.set()  # a rebalance suspends the flow
    result = await waiting
    assert result is not None
    assert result.results == [True]  # the flow's wait won
    await asyncio.sleep(0)
    room.set()
    await asyncio.sleep(0)
    assert steps == ["first step", "cancelled"]


async def test_while_the_flow_is_suspended_the_hand_out_takes_fausts_path_whole() -> None:
    flow = asyncio.Event()
    flow.set()
    started: list[bool] = []

    async def hand_out() -> None:
        started.append(True)

    calls: list[tuple[Any, ...]] = []

    async def wait_first(*coros: Any) -> Any:
        calls.append(coros)
        assert started == []  # not started before wait_first has it
        return await _Waiter().wait_first(*coros)

    result = await eager_wait_first(hand_out(), flow.wait(), may_start=False, wait_first=wait_first)
    assert len(calls) == 1 and result is not None


async def test_an_error_in_the_first_step_is_raised_and_nothing_left_unawaited() -> None:
    flow = asyncio.Event()

    async def hand_out() -> None:
        raise ValueError("undecodable")

    flow_wait = flow.wait()
    with pytest.raises(ValueError, match="undecodable"):
        await eager_wait_first(
            hand_out(), flow_wait, may_start=True, wait_first=_Waiter().wait_first
        )
    assert inspect.getcoroutinestate(flow_wait) == inspect.CORO_CLOSED


async def test_an_error_after_a_wait_reaches_the_caller() -> None:
    room = asyncio.Event()
    flow = asyncio.Event()

    async def hand_out() -> None:
        await room.wait()
        raise KeyError("late")

    waiting = asyncio.ensure_future(
        eager_wait_first(hand_out(), flow.wait(), may_start=True, wait_first=_Waiter().wait_first)
    )
    await asyncio.sleep(0)
    room.set()
    with pytest.raises(KeyError, match="late"):
        await waiting


async def test_context_variables_the_hand_out_sets_stay_in_it() -> None:
    room = asyncio.Event()
    flow = asyncio.Event()
    seen: list[str] = []

    async def hand_out() -> None:
        MARK.set("in hand-out")
        await room.wait()
        seen.append(MARK.get())  # its own setting, on every step

    waiting = asyncio.ensure_future(
        eager_wait_first(hand_out(), flow.wait(), may_start=True, wait_first=_Waiter().wait_first)
    )
    await asyncio.sleep(0)
    room.set()
    await waiting
    assert seen == ["in hand-out"]
    assert MARK.get() == "unset"


async def test_the_consumer_takes_the_fetch_loops_call_only(tmp_path: Path) -> None:
    app = App("sa-eager-hand-out", num_standby_replicas=0, datadir=str(tmp_path))
    consumer = app.consumer
    assert isinstance(consumer, Consumer)
    handed: list[int] = []

    async def hand_out(offset: int) -> None:
        handed.append(offset)

    consumer._hand_out = hand_out  # type: ignore[attr-defined]
    # Outside the fetch loop's task: mode's wait_first (a task per coroutine), counted nowhere.
    await consumer.wait_first(hand_out(0), consumer.suspend_flow.wait())
    assert (consumer.handed_out_at_once, consumer.handed_out_waiting) == (0, 0)

    async def in_fetch_loop() -> None:
        IN_FETCH_LOOP.set(True)
        await consumer.wait_first(hand_out(1), consumer.suspend_flow.wait())

        async def other(offset: int) -> None:
            handed.append(offset)

        # Another coroutine in the fetch loop's task: mode's wait_first.
        await consumer.wait_first(other(2), consumer.suspend_flow.wait())

    await asyncio.ensure_future(in_fetch_loop())
    assert handed == [0, 1, 2]
    assert (consumer.handed_out_at_once, consumer.handed_out_waiting) == (1, 0)

    # AHEAD_LIMIT records handed out and not processed: Faust's path, until they are.
    in_hand = [_Record() for _ in range(AHEAD_LIMIT)]
    consumer._unacked_messages.update(in_hand)  # type: ignore[attr-defined]

    async def ahead() -> None:
        IN_FETCH_LOOP.set(True)
        await consumer.wait_first(hand_out(3), consumer.suspend_flow.wait())
        consumer._unacked_messages.discard(in_hand.pop())  # type: ignore[attr-defined]
        await consumer.wait_first(hand_out(4), consumer.suspend_flow.wait())

    await asyncio.ensure_future(ahead())
    assert handed == [0, 1, 2, 3, 4]
    assert (consumer.handed_out_at_once, consumer.handed_out_waiting) == (2, 1)


class _Record:
    """Stands for a message handed out and not yet acked (the consumer keeps them weakly)."""


def test_fausts_fetch_loop_still_makes_the_call_recognised() -> None:
    # The call `Consumer.wait_first` recognises; a Faust change here ends the fast path
    # (the pinned-version check at import guards the release, this the call itself).
    source = inspect.getsource(FaustConsumer._drain_messages)
    assert "callback = self.callback" in source
    assert "self.wait_first(" in source
    assert "callback(message), self.suspend_flow.wait()" in source


def test_is_coroutine_of() -> None:
    async def f() -> None:
        return None

    async def g() -> None:
        return None

    coro = f()
    try:
        assert is_coroutine_of(coro, f)
        assert not is_coroutine_of(coro, g)
        assert not is_coroutine_of(f, f)
    finally:
        coro.close()


async def test_a_batch_topics_hand_out_does_not_yield_to_the_loop() -> None:
    """With ``keep_step`` false (a record of a topic read in batches) the fetch loop goes on to
    the next record without letting the agent run, so the agent finds a fetch's records queued;
    with it (the default) the loop runs once after each record."""
    ran: list[bool] = []

    async def hand_out() -> None:
        return None

    for keep_step in (False, True):
        asyncio.get_running_loop().call_soon(ran.append, keep_step)
        result = await eager_wait_first(
            hand_out(),
            asyncio.Event().wait(),
            may_start=True,
            wait_first=_Waiter().wait_first,
            keep_step=keep_step,
        )
        assert result is None
        assert ran == ([] if not keep_step else [False, True])
        await asyncio.sleep(0)
