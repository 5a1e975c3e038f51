"""The leader's metadata is asked again until the topics its plan left out are known."""

from __future__ import annotations

import asyncio

import pytest

from streamapp.left_out_topics import LeftOutTopics


class Metadata:
    """A consumer's metadata that learns of ``topic`` at its ``learns_at``-th refresh."""

    def __init__(self, topic: str, learns_at: int) -> None:
        self.topic = topic
        self.learns_at = learns_at
        self.refreshes = 0

    async def refresh(self) -> None:
        self.refreshes += 1

    def known(self, topic: str) -> bool:
        return topic != self.topic or self.refreshes >= self.learns_at


def left_out_topics(metadata: Metadata) -> LeftOutTopics:
    return LeftOutTopics(metadata.refresh, metadata.known, first_delay_s=0, max_delay_s=0)


async def test_refreshes_until_the_topic_is_known_then_stops() -> None:
    metadata = Metadata("t-changelog", learns_at=3)
    topics = left_out_topics(metadata)
    topics.note({"t-changelog"})
    assert topics.task is not None
    await topics.task
    assert metadata.refreshes == 3
    assert topics.waiting == frozenset()


async def test_nothing_left_out_asks_nothing() -> None:
    metadata = Metadata("t-changelog", learns_at=3)
    topics = left_out_topics(metadata)
    topics.note(set())
    assert topics.task is None
    assert metadata.refreshes == 0


async def test_a_plan_with_every_topic_stops_the_refreshes() -> None:
    metadata = Metadata("t-changelog", learns_at=10**9)  # never learnt
    topics = left_out_topics(metadata)
    topics.note({"t-changelog"})
    task = topics.task
    assert task is not None
    while metadata.refreshes < 2:
        await asyncio.sleep(0)
    topics.note(set())  # the next plan had it (learnt elsewhere, or no longer subscribed)
    await task
    assert not topics.waiting


async def test_one_task_for_plans_made_while_it_runs() -> None:
    metadata = Metadata("a", learns_at=2)
    topics = left_out_topics(metadata)
    topics.note({"a"})
    first = topics.task
    topics.note({"a", "b"})
    assert topics.task is first
    assert first is not None
    await first
    assert not topics.waiting  # "b" is known at once to this metadata


async def test_a_failed_refresh_is_tried_again() -> None:
    metadata = Metadata("a", learns_at=2)
    calls = 0

    async def flaky() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("connection reset")
        await metadata.refresh()

    topics = LeftOutTopics(flaky, metadata.known, first_delay_s=0, max_delay_s=0)
    topics.note({"a"})
    assert topics.task is not None
    await topics.task
    assert calls == 3 and metadata.refreshes == 2


async def test_stop_cancels_the_refreshes_and_waits_until_they_ended() -> None:
    metadata = Metadata("t-changelog", learns_at=10**9)  # never learnt: refreshes forever
    topics = left_out_topics(metadata)
    topics.note({"t-changelog"})
    task = topics.task
    assert task is not None
    while metadata.refreshes < 2:
        await asyncio.sleep(0)
    await topics.stop()
    assert task.cancelled()
    assert task not in asyncio.all_tasks()
    assert topics.task is None and not topics.waiting
    asked = metadata.refreshes
    for _ in range(10):
        await asyncio.sleep(0)
    assert metadata.refreshes == asked  # nothing asks a stopped consumer


async def test_stop_with_nothing_under_way_does_nothing_and_a_later_plan_starts_anew() -> None:
    metadata = Metadata("t-changelog", learns_at=2)
    topics = left_out_topics(metadata)
    await topics.stop()
    topics.note({"t-changelog"})
    assert topics.task is not None
    await topics.task
    assert metadata.refreshes == 2
    await topics.stop()  # done already: nothing to cancel


async def test_a_caller_cancelled_while_stopping_stays_cancelled() -> None:
    """stop() swallows the cancellation it caused, never one meant for its caller."""

    async def hanging_refresh() -> None:
        await asyncio.Event().wait()

    topics = LeftOutTopics(hanging_refresh, lambda _t: False, first_delay_s=0, max_delay_s=0)
    topics.note({"a"})
    refreshes = topics.task
    assert refreshes is not None
    await asyncio.sleep(0)
    stopping = asyncio.get_running_loop().create_task(topics.stop())
    await asyncio.sleep(0)  # stop() now awaits the cancelled refreshes
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert refreshes.cancelled()
