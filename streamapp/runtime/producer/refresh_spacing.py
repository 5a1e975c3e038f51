"""The metadata refreshes aiokafka's producer sender asks for, spaced by its retry backoff.

aiokafka 0.14's sender loop, holding a record for a partition whose leader its metadata does
not know, asks the client for a metadata refresh and waits for it, then asks again at once: no
backoff between the two. A partition that stays unknown (its topic deleted while the producer
holds records for it, or recreated with fewer partitions: a table's changelog) made it ask
about two thousand times a second, at about 40% of a core, until the partition came back or
the held record expired (Faust's ``producer_request_timeout``, 20 minutes by default). Kafka's
Java producer waits ``retry.backoff.ms`` between metadata refreshes.

Here the sender of a `streamapp.runtime.producer.client.WorkerProducer` gets, as the producer
starts, a view of its client (`SenderClient`) whose ``force_metadata_update`` starts a refresh
no sooner than the producer's ``retry_backoff_ms`` after the previous one it asked for ended
(`SpacedRefresh`); asked again meanwhile, it returns the refresh already on its way, as
aiokafka's does. The sender still wakes for anything else meanwhile (a produce answer, new
records), and a partition that comes back is seen at the next refresh, within one backoff.
Refreshes the producer itself asks for (the first send to a topic,
`streamapp.runtime.producer.partition_wait`) are not spaced: only the sender spun.

aiokafka internals (listed in `streamapp.runtime.producer.PRIVATE_NAMES`):
``AIOKafkaProducer._sender``, the sender's ``client`` and ``_retry_backoff``; the client's
``force_metadata_update``.
Delete when aiokafka's sender waits a backoff between the metadata refreshes it asks for.
Tests: tests/unit/streamapp/runtime/producer/test_refresh_spacing.py;
tests/integration/test_producer_metadata.py.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any


class SpacedRefresh:
    """A ``force_metadata_update`` whose refreshes start `backoff_s` after the last one ended.

    The first call, and any call a backoff or more after the last refresh ended, starts one at
    once; a call sooner schedules it for when the backoff is over. Calls while one is scheduled
    or running share it.
    """

    def __init__(
        self,
        force: Callable[[], Awaitable[bool]],
        backoff_s: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._force = force
        self._backoff_s = backoff_s
        self._loop = loop
        self._last_ended: float | None = None
        self._pending: asyncio.Future[bool] | None = None

    def delay(self) -> float:
        """How long a refresh asked for now waits before it starts (0: at once)."""
        if self._last_ended is None:
            return 0.0
        return max(0.0, self._last_ended + self._backoff_s - self._loop.time())

    def __call__(self) -> asyncio.Future[bool]:
        if self._pending is None or self._pending.done():
            pending: asyncio.Future[bool] = self._loop.create_future()
            self._pending = pending
            delay = self.delay()
            if delay > 0:
                # A timer, not a task: one left behind by a stopped producer is dropped with
                # its loop without a "task was destroyed but it is pending" warning.
                self._loop.call_later(delay, self._start, pending)
            else:
                self._start(pending)
        # Shielded as aiokafka's own: a caller that gives up does not cancel it for the others.
        return asyncio.shield(self._pending)

    def _start(self, pending: asyncio.Future[bool]) -> None:
        refresh = asyncio.ensure_future(self._force(), loop=self._loop)
        refresh.add_done_callback(functools.partial(self._ended, pending))

    def _ended(self, pending: asyncio.Future[bool], refresh: asyncio.Future[bool]) -> None:
        self._last_ended = self._loop.time()
        if pending.done():
            return
        if refresh.cancelled():
            pending.cancel()
        elif (error := refresh.exception()) is not None:
            pending.set_exception(error)
        else:
            pending.set_result(refresh.result())


class SenderClient:
    """The producer's client as its sender sees it: every attribute the client's, except
    ``force_metadata_update``, which is `SpacedRefresh`'s."""

    def __init__(self, client: Any, refresh: SpacedRefresh) -> None:
        self.client = client
        self.force_metadata_update = refresh

    def __getattr__(self, name: str) -> Any:
        # Only names not set above reach here: everything else the sender reads of its client.
        return getattr(self.client, name)


def space_sender_refreshes(producer: Any) -> None:
    """Give `producer`'s sender the spaced view of its client (once)."""
    sender = producer._sender
    if isinstance(sender.client, SenderClient):
        return
    client = sender.client
    refresh = SpacedRefresh(
        client.force_metadata_update, sender._retry_backoff, asyncio.get_running_loop()
    )
    sender.client = SenderClient(client, refresh)
