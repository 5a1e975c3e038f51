"""Prompt heartbeats after a cooperative join, so that KIP-429's second round starts sooner.

Under the cooperative protocol a partition changing owner is withheld for one round: its old
owner gives it up once the first join completes and rejoins at once, and the second join, which
hands it to its new owner, starts only once every other member has rejoined too. A member
learns that the group is rebalancing again from the broker's answer to its next heartbeat
(REBALANCE_IN_PROGRESS). aiokafka starts a member's heartbeats afresh after each join and sends
the first one a whole heartbeat interval later, so the second round could not start before one
interval after the first had completed, and no worker processes the moved partition in between:
in `bench/adclick.py`'s scale-out, 0.39 s of a moved partition's 1.0 s handover, at the app's
0.5 s heartbeat interval (Faust's default is 3 s).

So from the moment a join of a worker whose group runs cooperative completes, the member
heartbeats `PROMPT_HEARTBEATS` times through a window of `PROMPT_WINDOW_S` (or its heartbeat
interval, if longer; at least `PROMPT_INTERVAL_S` apart), until the broker says the group
rebalances again; aiokafka's own heartbeat routine then takes over. A join that kept the
member's partitions starts them before the assignment's listener calls (Faust's handlers,
0.1-0.7 s on the busy 2-core machine, during which the old owner's rejoin often came); the
first join of a new worker (it owned nothing, so it joined the eager way) starts them once its
assignment said the group runs cooperative, as aiokafka would start its own: a new worker that
gains only withheld partitions is the member that must hear of the second round
(`streamapp.runtime.group.cooperative` calls `PromptHeartbeats.start_prompt_heartbeats`). No
member knows whether another one gave something up, so every member does it after every such
join: twenty heartbeats more per member and rebalance, which the group coordinator answers
from memory. Eager groups keep aiokafka's heartbeats (no second round follows their joins).

A member whose SyncGroup reaches the broker after another member's rejoin misses that round
(REBALANCE_IN_PROGRESS) and rejoins; that is Kafka's, with or without these heartbeats, which
only make members that heard nothing yet rejoin sooner once a rebalance has begun: they start
none (see docs/rebalance-pauses.md).

Each prompt heartbeat that heard of the next rebalance is logged at INFO (``rebalances again:
heard at prompt heartbeat``).

aiokafka internals (listed in `streamapp.runtime.group.PRIVATE_NAMES`): ``GroupCoordinator``'s
``_heartbeat_routine`` (overridden: the prompt heartbeats, then aiokafka's own routine),
``_start_heartbeat_task``, ``_do_heartbeat`` (the one heartbeat and its answer's handling,
aiokafka's own), ``_heartbeat_interval_ms`` and ``_subscription``.
Delete when aiokafka heartbeats at once after a join, or implements KIP-429 itself.
Tests: tests/unit/streamapp/runtime/group/test_prompt_heartbeats.py;
tests/integration/test_cooperative_rebalance.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.group import JoinGroupRequest

logger = logging.getLogger(__name__)

#: Between two prompt heartbeats, at least.
PROMPT_INTERVAL_S = 0.05
#: How long the prompt heartbeats go on after a join, at least (or one heartbeat interval).
PROMPT_WINDOW_S = 2.0
#: The most prompt heartbeats after a join: their interval is the window's share.
PROMPT_HEARTBEATS = 20

# The routine's sleep (the unit tests run it on a clock of their own).
_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep


def prompt_schedule(heartbeat_interval_ms: int) -> tuple[float, int]:
    """The interval between prompt heartbeats and how many there are, for a member with this
    heartbeat interval."""
    window = max(heartbeat_interval_ms / 1000, PROMPT_WINDOW_S)
    interval = max(PROMPT_INTERVAL_S, window / PROMPT_HEARTBEATS)
    return interval, max(1, round(window / interval))


class PromptHeartbeats(GroupCoordinator):  # type: ignore[misc]
    """aiokafka's coordinator, heartbeating promptly for a moment when asked after a join."""

    #: Whether the next heartbeat routine starts with prompt heartbeats.
    _prompt_heartbeats_due = False

    def start_prompt_heartbeats(self) -> None:
        """A join of this member (its group cooperative) completed: its heartbeats start now,
        prompt.

        Started before the assignment's listener calls, they also keep the member alive through
        them, as they do through the join itself; aiokafka's own start after the join then finds
        them running and leaves them be.
        """
        self._prompt_heartbeats_due = True
        self._start_heartbeat_task()

    async def _heartbeat_routine(self) -> None:
        if self._prompt_heartbeats_due:
            self._prompt_heartbeats_due = False
            try:
                await self._prompt_heartbeats()
            except asyncio.CancelledError:
                # Stopped as aiokafka stops its routine (a rejoin begins): it ends quietly.
                return
        await super()._heartbeat_routine()

    async def _prompt_heartbeats(self) -> None:
        """The prompt heartbeats of `prompt_schedule`, until the broker says the group
        rebalances (aiokafka's ``_do_heartbeat`` then requests the rejoin) or a heartbeat fails
        (aiokafka's routine handles what follows, as it would have)."""
        interval, count = prompt_schedule(self._heartbeat_interval_ms)
        subscription = self._subscription
        for number in range(1, count + 1):
            if self.member_id == JoinGroupRequest.UNKNOWN_MEMBER_ID or self.need_rejoin(
                subscription.subscription
            ):
                return
            await _sleep(interval)
            await self.ensure_coordinator_known()
            if not await self._do_heartbeat():
                return
            if self.need_rejoin(subscription.subscription):
                logger.info(
                    "streamapp: group %s rebalances again: heard at prompt heartbeat %d of %d "
                    "after generation %s",
                    self.group_id,
                    number,
                    count,
                    self.generation,
                )
                return
