"""Work handed to the fetch loop from other tasks, run by the loop between two of its rounds.

The fetch loop is the one task that reads from the consumer, hands records out and commits.
Other tasks (the group coordinator's rebalance callbacks, an agent asking for a commit, a seek
asked by an app) do not touch the consumer themselves: they queue a command and await it. The
loop runs queued commands in order before its next fetch, so nothing changes a partition's
position, pause or ownership while the loop is handing out its records.

When the loop is not running (before it starts, while the worker stops), a command runs in the
caller's task at once: there is no loop whose round it could interleave with.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Commands:
    """A queue of coroutine functions the loop runs in order; callers await their results."""

    def __init__(self) -> None:
        self._queue: deque[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]]] = deque()
        #: Set while a command waits: wakes the loop from its wait for records.
        self.pending = asyncio.Event()
        #: True while the loop runs and takes commands.
        self.taking = False
        #: Commands submitted while the loop is not running, running as tasks of their own.
        self._detached: set[asyncio.Future[Any]] = set()

    async def run(self, command: Callable[[], Awaitable[T]]) -> T:
        """Run ``command`` in the loop's task (or here, when the loop is not running)."""
        if not self.taking:
            return await command()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append((command, future))
        self.pending.set()
        return await future

    def submit(self, command: Callable[[], Awaitable[Any]]) -> None:
        """Queue ``command`` for the loop's next round, from code that cannot await it (when
        the loop is not running, it runs as a task of its own)."""
        if not self.taking:
            self._detached.add(asyncio.ensure_future(command()))
            self._detached = {task for task in self._detached if not task.done()}
            return
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((command, future))
        self.pending.set()

    async def run_queued(self) -> None:
        """Run every queued command, in order (the loop's task calls this)."""
        while self._queue:
            command, future = self._queue.popleft()
            if future.cancelled():
                continue
            try:
                result = await command()
            except BaseException as exc:
                if not future.cancelled():
                    future.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                    raise
            else:
                if not future.cancelled():
                    future.set_result(result)
        self.pending.clear()

    async def stop_taking(self) -> None:
        """The loop ends: run what is queued, and run later commands in their callers."""
        self.taking = False
        await self.run_queued()
