"""Subscribed topics the leader planned without (no partitions in its metadata): its consumer's
metadata is asked again until each has its partitions, so the group plans with them.

aiokafka refreshes a consumer's metadata every ``metadata_max_age_ms`` (Faust's default: five
minutes), or when one of its own requests fails. A topic created a moment before, by this
worker or another (Faust creates a table's changelog as the table starts, possibly while the
consumer's first metadata request is under way, and a broker may answer a metadata request
before it has applied a topic its controller just created), can be missing from the answer;
nothing the consumer does afterwards fails on it, so it stayed missing for minutes. The leader
then planned without it (`streamapp.partition_assignor`: "has no partitions (yet); left out"):
a changelog left out is neither restored nor replicated, a global table's is read by nobody.

As soon as a refresh finds the topic, aiokafka sees the group's topics change and rejoins, and
the leader plans with it. Refreshes start `FIRST_DELAY_S` after the plan and back off to one
per `MAX_DELAY_S`; they stop once every topic left out by the last plan is known. A topic
deleted for good is asked about once per `MAX_DELAY_S` (``streamapp.changelog_watch`` says
what is wrong with a changelog).

The refreshes live no longer than the consumer they ask through: `LeftOutTopics.stop`, called
as the consumer's thread stops (`StreamappPartitionAssignor.on_consumer_thread_stop`), cancels
them and waits until they ended, before the consumer stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

logger = logging.getLogger(__name__)

#: The first refresh after a plan left a topic out: soon, as the topic is usually a moment old.
FIRST_DELAY_S = 0.5
#: The longest wait between two refreshes while a topic stays unknown: one metadata request
#: this rare costs the broker nothing.
MAX_DELAY_S = 10.0


class LeftOutTopics:
    """Refreshes metadata, on the loop of the consumer that planned, until the topics the last
    plan left out are known. `note` is called by each plan; `refresh` asks the consumer's
    metadata again (and returns once it has the answer); `known` tells whether its metadata
    now has partitions of a topic."""

    def __init__(
        self,
        refresh: Callable[[], Awaitable[None]],
        known: Callable[[str], bool],
        *,
        first_delay_s: float = FIRST_DELAY_S,
        max_delay_s: float = MAX_DELAY_S,
    ) -> None:
        self.refresh = refresh
        self.known = known
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.waiting: frozenset[str] = frozenset()
        self.task: asyncio.Task[None] | None = None

    def note(self, left_out: Iterable[str]) -> None:
        """The topics the plan just made left out (none: any refreshes under way stop)."""
        self.waiting = frozenset(left_out)
        if self.waiting and (self.task is None or self.task.done()):
            # Called from the plan, on the running loop of the consumer's thread.
            self.task = asyncio.get_running_loop().create_task(self._catch_up())

    async def stop(self) -> None:
        """Cancel the refreshes under way and return once they ended; on the loop that runs them.

        Left running, a refresh would ask a stopped consumer, and the task would be pending
        when the consumer thread's loop closes. A later plan (the worker started again)
        starts them anew.
        """
        self.waiting = frozenset()
        task, self.task = self.task, None
        if task is None or task.done():
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            # Ours, unless the caller is being cancelled too: then it goes on up.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def _catch_up(self) -> None:
        delay = self.first_delay_s
        while self.waiting:
            await asyncio.sleep(delay)
            try:
                await self.refresh()
            except Exception as exc:  # a failed request: the next one may succeed
                logger.debug("streamapp: metadata refresh failed: %r", exc)
            found = {t for t in self.waiting if self.known(t)}
            if found:
                logger.info(
                    "streamapp: topic(s) %s now known to this worker's metadata; the group "
                    "plans again with their partitions",
                    ", ".join(sorted(found)),
                )
            self.waiting -= found
            delay = min(delay * 2, self.max_delay_s)
