"""refresh_spacing: the refreshes a worker producer's sender asks for wait a backoff apart.

The refresh here is a stand-in for the client's ``force_metadata_update``: it counts the
refreshes started and ends each when the test says. Timers are caught (the loop's
``call_later``), so a refresh scheduled for later is seen without waiting for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

from streamapp.runtime.producer.client import WorkerProducer
from streamapp.runtime.producer.refresh_spacing import (
    SenderClient,
    SpacedRefresh,
    space_sender_refreshes,
)


class _Refreshes:
    """``force_metadata_update`` of a client: one refresh at a time, ended by `end`."""

    def __init__(self) -> None:
        self.started = 0
        self.running: asyncio.Future[bool] | None = None

    def __call__(self) -> asyncio.Future[bool]:
        if self.running is None:
            self.started += 1
            self.running = asyncio.get_running_loop().create_future()
        return asyncio.shield(self.running)

    def end(self, result: bool = True) -> None:
        assert self.running is not None
        self.running.set_result(result)
        self.running = None


Timer = tuple[float, Callable[..., Any], tuple[Any, ...]]


def catch_timers(monkeypatch: pytest.MonkeyPatch) -> list[Timer]:
    """The running loop's timers from now on, caught instead of run."""
    caught: list[Timer] = []
    loop = asyncio.get_running_loop()

    def call_later(delay: float, callback: Callable[..., Any], *args: Any) -> None:
        caught.append((delay, callback, args))

    monkeypatch.setattr(loop, "call_later", call_later)
    return caught


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_first_refresh_starts_at_once_and_callers_meanwhile_share_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timers = catch_timers(monkeypatch)
    refreshes = _Refreshes()
    spaced = SpacedRefresh(refreshes, backoff_s=0.1, loop=asyncio.get_running_loop())
    first, second = spaced(), spaced()
    assert refreshes.started == 1 and timers == []
    refreshes.end()
    assert await first is True and await second is True
    assert refreshes.started == 1


async def test_a_refresh_asked_right_after_one_ended_waits_the_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timers = catch_timers(monkeypatch)
    refreshes = _Refreshes()
    spaced = SpacedRefresh(refreshes, backoff_s=100.0, loop=asyncio.get_running_loop())
    first = spaced()
    refreshes.end()
    await first
    # The sender loop: the refresh came back, the partition is still unknown, it asks again.
    again = spaced()
    await _settle()
    assert refreshes.started == 1 and not again.done()
    assert len(timers) == 1
    delay, callback, args = timers[0]
    assert 99.0 < delay <= 100.0
    # Asked again while it waits (the sender woke for a produce answer): the same refresh.
    third = spaced()
    assert len(timers) == 1 and refreshes.started == 1
    callback(*args)  # the backoff is over
    assert refreshes.started == 2
    refreshes.end(False)
    assert await again is False and await third is False


async def test_a_refresh_asked_a_backoff_after_the_last_one_ended_starts_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timers = catch_timers(monkeypatch)
    refreshes = _Refreshes()
    spaced = SpacedRefresh(refreshes, backoff_s=0.0, loop=asyncio.get_running_loop())
    for started in range(1, 4):
        asked = spaced()
        assert refreshes.started == started
        refreshes.end()
        await asked
    assert timers == []


async def test_a_caller_giving_up_does_not_cancel_the_refresh_for_the_others() -> None:
    refreshes = _Refreshes()
    spaced = SpacedRefresh(refreshes, backoff_s=0.1, loop=asyncio.get_running_loop())
    impatient, patient = spaced(), spaced()
    impatient.cancel()
    refreshes.end()
    assert await patient is True


async def test_the_sender_sees_its_client_with_the_spaced_refresh_only() -> None:
    producer = WorkerProducer(bootstrap_servers="127.0.0.1:9", retry_backoff_ms=250)
    try:
        client = producer.client
        space_sender_refreshes(producer)
        space_sender_refreshes(producer)  # a second start: still one view, over the client
        view = producer._sender.client
        assert isinstance(view, SenderClient) and view.client is client
        assert isinstance(view.force_metadata_update, SpacedRefresh)
        assert view.force_metadata_update._backoff_s == 0.25
        assert view.cluster is client.cluster  # everything else is the client's
        assert view.get_random_node() == client.get_random_node()
        # The producer's own refreshes (a first send to a topic) are not spaced.
        assert client.force_metadata_update.__func__ is type(client).force_metadata_update
    finally:
        await producer.stop()


async def test_a_worker_producer_spaces_its_sender_s_refreshes_as_it_starts_a_plain_one_not() -> (
    None
):
    worker = WorkerProducer(bootstrap_servers="127.0.0.1:9", request_timeout_ms=1000)
    plain = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", request_timeout_ms=1000)
    try:
        for producer in (worker, plain):
            with pytest.raises(KafkaConnectionError):  # no broker: the start got that far
                await producer.start()
        assert isinstance(worker._sender.client, SenderClient)
        assert plain._sender.client is plain.client
    finally:
        await worker.stop()
        await plain.stop()
