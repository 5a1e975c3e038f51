"""Faust's fetch loop hands a record to the streams without a task per record.

Faust's fetch loop (``faust.transport.consumer.Consumer._drain_messages``) hands each fetched
record to the conductor with ``await self.wait_first(callback(message),
self.suspend_flow.wait())``. mode's ``wait_first`` wraps the callback, the flow's wait and the
service's stopped and crashed events in four tasks and ``asyncio.wait``\\s on them: per record,
four tasks, about ten futures, and two or three event-loop iterations before the fetch loop
goes on to the next record, whose own hand-out then starts in the iteration after. That was
the largest single share of the asyncio machinery in a worker's profile (docs/performance.md).

Almost always the hand-out has nothing to wait for: no commit holds it, the flow runs, the
stream's queue has room, and the conductor's lock is free. Here the callback's coroutine takes
its first step at once, in the fetch loop's own task. When it finishes there, that was the whole
hand-out: no task, no future, no loop iteration of its own. When it has to wait (a full queue, a
commit in progress, flow control), what remains of it goes to Faust's ``wait_first`` exactly as
the whole callback did, raced against the flow's suspension and the consumer stopping or
crashing: Faust's ``wait_first`` would also have run the callback's first step (its task is
created first and steps first), so nothing the callback does is skipped or done differently.

Handed out at once, a record costs the fetch loop so little that it would run a whole fetch
ahead of the agents, until the streams' queues are full (``stream_buffer_maxsize``, 4,096
records): latency grows by that backlog, and under exactly_once every commit first waits for all
of it to be processed (streamapp's commit between records): in the benchmark that took
exactly_once from ~350 to ~1,200 µs of CPU per record (docs/performance.md). So the fetch loop
stays in step with the agents: after a record handed out at once it yields to the loop once (an
agent takes one record per loop iteration, Faust's stream iterator yields once per record), and
while `AHEAD_LIMIT` records or more are handed out and not yet processed, records take Faust's
path whole (which is slower than an agent, so the backlog drains; it is where an agent slower
than the fetch loop would be without this module too).

The steps run in a copy of the fetch loop's context, as they would in a task of their own:
nothing the callback sets in a context variable leaks into the fetch loop. With the flow
suspended or the consumer stopping when a record comes, the record takes Faust's path whole.

Faust private name this relies on (checked at import with the others,
`streamapp.faust_compat.PRIVATE_NAMES`): ``faust.transport.consumer.Consumer._drain_messages``,
whose call ``self.wait_first(callback(message), self.suspend_flow.wait())`` is what
`streamapp.faust_compat.transport.Consumer.wait_first` recognises (the callback's coroutine is
streamapp's own hand-out; any other call goes to mode's ``wait_first`` untouched).

A record of a topic an agent reads in batches (`streamapp.batches`) is handed out without the
yield, while fewer than `BATCH_AHEAD_LIMIT` records are in hand: the agent takes what its
queue holds when it wakes, so a yield per record would make batches of one record. The agent
acks a batch only once it is processed, so the limit is what a commit under exactly_once may
wait for.

Delete when Faust's fetch loop hands records to the conductor without a task per record (or
mode's ``wait_first`` starts its tasks eagerly, as Python 3.12's eager tasks would).
Tests: tests/unit/streamapp/faust_compat/test_eager_hand_out.py;
tests/integration/test_eager_hand_out.py (exactly_once counts through a SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

from mode.services import WaitResults

#: Records handed out and not yet processed (acked) at which hand-outs take Faust's path.
AHEAD_LIMIT = 100
#: The same for a record of a topic an agent reads in batches (`streamapp.batches`): such an
#: agent takes what its queue holds when it wakes, so the fetch loop hands a fetch's records
#: out without a yield between them, up to this many in hand.
BATCH_AHEAD_LIMIT = 2000

#: What `eager_wait_first` hands what it cannot finish at once to: mode's ``wait_first``.
WaitFirst = Callable[..., Awaitable[WaitResults]]


class _Rest:
    """Awaitable: the rest of a coroutine that has yielded ``pending`` to whoever drives it.

    Each step runs in ``context``; a cancellation or any other exception thrown in is passed
    on to the coroutine, as a task would pass it on.
    """

    __slots__ = ("_context", "_coro", "_pending")

    def __init__(
        self, coro: Coroutine[Any, Any, Any], pending: Any, context: contextvars.Context
    ) -> None:
        self._coro = coro
        self._pending = pending
        self._context = context

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, context, to_yield = self._coro, self._context, self._pending
        self._pending = None
        while True:
            try:
                sent = yield to_yield
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # passed on to the coroutine, as a task would
                try:
                    to_yield = context.run(coro.throw, exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    to_yield = context.run(coro.send, sent)
                except StopIteration as stop:
                    return stop.value


async def _finish(rest: _Rest) -> Any:
    return await rest


async def eager_wait_first(
    hand_out: Coroutine[Any, Any, Any],
    flow_suspended: Coroutine[Any, Any, Any],
    *,
    may_start: bool,
    wait_first: WaitFirst,
    keep_step: bool = True,
) -> WaitResults | None:
    """Hand one record out: at once if it needs no wait, else through ``wait_first``.

    ``hand_out`` is the callback's coroutine for the record and ``flow_suspended`` the flow's
    wait, as Faust's fetch loop passes them. ``may_start`` is false while the flow is suspended,
    the consumer stopping or `AHEAD_LIMIT` records are in hand: then both go to ``wait_first``
    untouched. Returns None when the hand-out finished at once (having yielded to the loop
    once, for the agents to keep step, unless ``keep_step`` is false), else what
    ``wait_first`` returned.
    """
    if not may_start:
        return await wait_first(hand_out, flow_suspended)
    context = contextvars.copy_context()
    try:
        pending = context.run(hand_out.send, None)
    except StopIteration:
        flow_suspended.close()
        if keep_step:
            await asyncio.sleep(0)
        return None
    except BaseException:
        flow_suspended.close()
        raise
    # It waits for something: the rest races the flow's suspension as the whole did.
    return await wait_first(_finish(_Rest(hand_out, pending, context)), flow_suspended)


def is_coroutine_of(obj: object, function: Callable[..., Any]) -> bool:
    """Whether ``obj`` is a coroutine object made by calling ``function``."""
    code = getattr(function, "__code__", None)
    return asyncio.iscoroutine(obj) and getattr(obj, "cr_code", None) is code
