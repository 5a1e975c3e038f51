"""Test-only: hold a worker's first replay until its next rebalance begins.

Not a setting, and not for users: off unless ``STREAMAPP_TEST_ONLY_HOLD_FIRST_REPLAY`` is
``1``, a name nobody sets by accident. Set, recovery takes no changelog record from the
changelog queue from the worker's first rebalance until its next one begins (a worker that
never rebalances again never recovers). Meanwhile the fetch loop goes on fetching the changelog
records of that first replay into the queue, as it does while recovery is busy with a long
replay (a big global table, a slow machine): the next rebalance lands during that replay with
records fetched and not yet applied, every time. The tests use it to make a cooperative round
land during a newcomer's first (eager) recovery on a real broker
(tests/integration/test_rebalance_during_recovery.py).
"""

from __future__ import annotations

import asyncio
import logging
import os

logger = logging.getLogger(__name__)

ENV = "STREAMAPP_TEST_ONLY_HOLD_FIRST_REPLAY"


class FirstReplayHold:
    """The hold of one process (see the module docs)."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.rebalances = 0
        self._released: asyncio.Event | None = None

    def on_rebalance(self) -> None:
        """A rebalance's recovery step began: the second one releases the hold."""
        self.rebalances += 1
        if self.on and self.rebalances == 2:
            logger.warning("streamapp: TEST ONLY: first replay released by the next rebalance")
            self._event().set()

    async def wait(self) -> None:
        """Before recovery takes a changelog record: held during the first rebalance only."""
        if self.on and self.rebalances == 1:
            await self._event().wait()

    def _event(self) -> asyncio.Event:
        if self._released is None:
            self._released = asyncio.Event()
        return self._released


#: The process's hold, read from the environment once.
HOLD = FirstReplayHold(os.environ.get(ENV) == "1")
