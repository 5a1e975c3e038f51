"""Prompt heartbeats after a cooperative join (`streamapp.runtime.group.prompt_heartbeats`).

The routine runs on a coordinator whose aiokafka steps are stand-ins (a base class below
streamapp's), with a clock of its own: what the broker answers a heartbeat, and the rebalance
that follows, are tested on a real one in tests/integration/test_cooperative_rebalance.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.consumer import group_coordinator as aiokafka_gc
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.structs import TopicPartition as TP

from streamapp.runtime.group import prompt_heartbeats
from streamapp.runtime.group.cooperative import CooperativeJoin
from streamapp.runtime.group.prompt_heartbeats import PromptHeartbeats

HEARTBEAT_INTERVAL_MS = 500


class AiokafkaHeartbeats(aiokafka_gc.GroupCoordinator):  # type: ignore[misc]
    """The attributes of aiokafka's GroupCoordinator the prompt heartbeats use, and its own
    heartbeat routine (which only says it ran)."""

    def __init__(self, answers: list[str]) -> None:
        self._heartbeat_interval_ms = HEARTBEAT_INTERVAL_MS
        self.member_id = "member-1"
        self.group_id = "g"
        self.generation = 3
        self._subscription = SubscriptionState()
        self._subscription.subscribe({"t"})
        self.answers = answers  # "ok", "rebalancing" or "failed", one per heartbeat
        self.events: list[str] = []
        self.rejoin = False

    def need_rejoin(self, subscription: Any) -> bool:
        return self.rejoin

    def _start_heartbeat_task(self) -> None:
        self.events.append("heartbeats started")

    async def ensure_coordinator_known(self) -> None:
        return None

    async def _do_heartbeat(self) -> bool:
        answer = self.answers.pop(0) if self.answers else "ok"
        self.events.append(f"heartbeat {answer}")
        if answer == "rebalancing":
            self.rejoin = True  # aiokafka's request_rejoin
        return answer != "failed"

    async def _heartbeat_routine(self) -> None:
        self.events.append("aiokafka's routine")


class Coordinator(PromptHeartbeats, AiokafkaHeartbeats):
    """streamapp's prompt heartbeats over aiokafka's routine."""


class Clock:
    def __init__(self) -> None:
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(prompt_heartbeats, "_sleep", clock.sleep)
    return clock


async def test_after_a_cooperative_join_the_broker_hears_from_the_member_at_once(
    clock: Clock,
) -> None:
    coordinator = Coordinator(["ok", "ok", "rebalancing"])
    coordinator.start_prompt_heartbeats()
    await coordinator._heartbeat_routine()
    # aiokafka's routine would have sent its first heartbeat after 0.5 s; the third prompt
    # one heard of the second round after 0.3 s, and requested the rejoin.
    assert coordinator.events == [
        "heartbeats started",
        "heartbeat ok",
        "heartbeat ok",
        "heartbeat rebalancing",
        "aiokafka's routine",
    ]
    assert clock.sleeps == [pytest.approx(0.1)] * 3
    assert coordinator.rejoin


async def test_prompt_heartbeats_go_on_through_their_window(clock: Clock) -> None:
    coordinator = Coordinator([])  # no second round: every answer is ok
    coordinator.start_prompt_heartbeats()
    await coordinator._heartbeat_routine()
    assert coordinator.events == ["heartbeats started"] + ["heartbeat ok"] * 20 + [
        "aiokafka's routine"
    ]
    assert sum(clock.sleeps) == pytest.approx(prompt_heartbeats.PROMPT_WINDOW_S)


def test_the_window_is_two_seconds_or_one_heartbeat_interval_twenty_heartbeats() -> None:
    assert prompt_heartbeats.prompt_schedule(500) == (pytest.approx(0.1), 20)
    assert prompt_heartbeats.prompt_schedule(3000) == (pytest.approx(0.15), 20)  # Faust's
    assert prompt_heartbeats.prompt_schedule(1) == (pytest.approx(0.1), 20)


async def test_a_failed_heartbeat_is_left_to_aiokafka_s_routine(clock: Clock) -> None:
    coordinator = Coordinator(["failed"])
    coordinator.start_prompt_heartbeats()
    await coordinator._heartbeat_routine()
    assert coordinator.events == ["heartbeats started", "heartbeat failed", "aiokafka's routine"]


async def test_only_the_heartbeats_right_after_the_join_are_prompt(clock: Clock) -> None:
    coordinator = Coordinator(["rebalancing"])
    coordinator.start_prompt_heartbeats()
    await coordinator._heartbeat_routine()
    coordinator.events.clear()
    await coordinator._heartbeat_routine()  # restarted, no join since
    assert coordinator.events == ["aiokafka's routine"]


async def test_a_rejoin_stops_the_prompt_heartbeats_quietly(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator = Coordinator([])
    stopped = asyncio.Event()

    async def stopping_sleep(seconds: float) -> None:
        stopped.set()
        await asyncio.Event().wait()  # cancelled here, as aiokafka stops its routine

    coordinator.start_prompt_heartbeats()
    coordinator.events.clear()
    monkeypatch.setattr(prompt_heartbeats, "_sleep", stopping_sleep)
    task = asyncio.create_task(coordinator._heartbeat_routine())
    await stopped.wait()
    task.cancel()
    await task  # no CancelledError out of it: aiokafka's _stop_heartbeat_task awaits it
    assert coordinator.events == []


class Assignor:
    """streamapp's, as the join steps ask it; ``keeps`` is whether its group runs cooperative."""

    def __init__(self, keeps: bool) -> None:
        self.keeps = keeps

    def keeps_owned_through_join(self) -> bool:
        return self.keeps

    def on_join_prepared(self, *, kept_owned: bool) -> None:
        return None


class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.events.append("listener: revoked")

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.events.append("listener: assigned")


class AiokafkaJoinSteps(AiokafkaHeartbeats):
    """And what the cooperative join steps use (see test_cooperative_join.py); aiokafka's own
    prepare does nothing here, its completion tells the listener (with ``on_complete`` first)."""

    def __init__(self, keeps: bool) -> None:
        super().__init__([])
        self._subscription.subscribe({"t"}, listener=Listener(self.events))
        owned = {TP("t", 0), TP("t", 1)}
        self._subscription.assign_from_subscribed(owned)
        self._assignors = [Assignor(keeps)]
        self._group_subscription: object = {"t"}
        self.generation = 4
        self.group_id = "g"
        self.on_complete: Any = None

    async def _maybe_do_last_autocommit(self, assignment: Any) -> None:
        return None

    def request_rejoin(self) -> None:
        self.rejoin = True

    async def _on_join_prepare(self, previous: Any) -> None:
        return None

    async def _on_join_complete(self, *args: Any) -> None:
        if self.on_complete is not None:
            self.on_complete()
        await self._subscription.listener.on_partitions_assigned(set())


class JoiningCoordinator(CooperativeJoin, AiokafkaJoinSteps):
    """streamapp's cooperative join and prompt heartbeats over aiokafka's steps."""


@pytest.mark.parametrize("keeps", [True, False])
async def test_a_cooperative_join_starts_prompt_heartbeats_before_its_handlers_an_eager_one_not(
    clock: Clock, keeps: bool
) -> None:
    coordinator = JoiningCoordinator(keeps)
    await coordinator._on_join_prepare(coordinator._subscription.subscription.assignment)
    data = ConsumerProtocolMemberAssignment(0, [("t", [0])], b"").encode()
    await coordinator._on_join_complete(5, "m", "streamapp", data)
    if keeps:
        assert coordinator.events == [
            "heartbeats started",  # before Faust's handlers run, in the listener's calls
            "listener: revoked",
            "listener: assigned",
        ]
        assert coordinator._prompt_heartbeats_due
    else:  # aiokafka's path: its own start, once the join step has returned
        assert coordinator.events == ["listener: assigned"]
        assert not coordinator._prompt_heartbeats_due


async def test_a_new_worker_s_first_join_starts_prompt_heartbeats_once_its_group_is_cooperative(
    clock: Clock,
) -> None:
    """It owned nothing, so it joined the eager way; the assignment said the group runs
    cooperative, and a second round, which it must hear of, may follow."""
    coordinator = JoiningCoordinator(keeps=False)
    assignor = coordinator._assignors[0]

    def assigned_cooperative() -> None:
        assignor.keeps = True  # the assignment said the group runs cooperative

    coordinator.on_complete = assigned_cooperative
    await coordinator._on_join_prepare(None)
    data = ConsumerProtocolMemberAssignment(0, [("t", [0])], b"").encode()
    await coordinator._on_join_complete(1, "m", "streamapp", data)
    assert coordinator.events == ["listener: assigned", "heartbeats started"]
    assert coordinator._prompt_heartbeats_due


async def test_aiokafkas_coordinator_keeps_its_own_heartbeats(clock: Clock) -> None:
    """A plain aiokafka consumer in the same process keeps aiokafka's heartbeats: its class's
    routine is aiokafka's, and has no prompt heartbeats to start."""
    assert aiokafka_gc.GroupCoordinator._heartbeat_routine.__module__ == aiokafka_gc.__name__
    assert not hasattr(aiokafka_gc.GroupCoordinator, "start_prompt_heartbeats")
    worker = Coordinator(["rebalancing"])
    worker.start_prompt_heartbeats()
    await worker._heartbeat_routine()
    assert worker.events == [
        "heartbeats started",
        "heartbeat rebalancing",
        "aiokafka's routine",
    ]
