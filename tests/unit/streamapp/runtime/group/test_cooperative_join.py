"""The cooperative join (KIP-429) on aiokafka's coordinator: what the listener is told, when.

aiokafka's own steps under the overriding ones (its eager join prepare, applying an assignment)
are stand-ins here, a base class below streamapp's in the coordinator's class; what the broker
does with them is tested on a real one in tests/integration/test_cooperative_rebalance.py.
"""

from __future__ import annotations

from typing import Any

from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.structs import TopicPartition as TP

from streamapp.runtime.group.cooperative import CooperativeJoin


class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.calls: list[tuple[str, set[TP]]] = []

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.calls.append(("revoked", set(revoked)))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.calls.append(("assigned", set(assigned)))


class Assignor:
    def __init__(self, keeps: bool) -> None:
        self.keeps = keeps
        self.prepared: list[bool] = []

    def keeps_owned_through_join(self) -> bool:
        return self.keeps

    def on_join_prepared(self, *, kept_owned: bool) -> None:
        self.prepared.append(kept_owned)


class MarkingAssignor(Assignor):
    """As streamapp's assignor: it takes a join incrementally unless ``eager_pending`` (the
    recovery of an eager rebalance under way, `incremental.ready`)."""

    def __init__(self, eager_pending: bool = False) -> None:
        super().__init__(keeps=True)
        self.incremental: list[bool] = []
        self.eager_pending = eager_pending
        self.incremental_join = False

    def on_incremental_join(self, incremental: bool) -> None:
        self.incremental.append(incremental)
        self.incremental_join = incremental and not self.eager_pending


class AiokafkaSteps(GroupCoordinator):  # type: ignore[misc]
    """The attributes of aiokafka's GroupCoordinator the cooperative steps use, and aiokafka's
    own join steps: an eager prepare revokes everything, a completion applies the assignment
    and tells the listener."""

    def __init__(self, assignor: Assignor, owned: set[TP]) -> None:
        self._assignors = [assignor]
        self.listener = Listener()
        self._subscription = SubscriptionState()
        self._subscription.subscribe({"t"}, listener=self.listener)
        self._subscription.assign_from_subscribed(owned)
        self._group_subscription: object = {"t"}
        self.generation = 4
        self.group_id = "g"
        self.rejoins = 0

    async def _maybe_do_last_autocommit(self, assignment: Any) -> None:
        return None

    def request_rejoin(self) -> None:
        self.rejoins += 1

    def _start_heartbeat_task(self) -> None:  # the prompt heartbeats
        return None

    async def _on_join_prepare(self, previous: Any) -> None:  # aiokafka's: revoke all
        await self.listener.on_partitions_revoked(previous.tps if previous else set())

    async def _on_join_complete(self, _g: int, _m: str, _p: str, data: bytes) -> None:
        assignment = ConsumerProtocolMemberAssignment.decode(data)
        self._subscription.assign_from_subscribed(set(assignment.partitions()))
        await self.listener.on_partitions_assigned(self._subscription.assigned_partitions())


class Coordinator(CooperativeJoin, AiokafkaSteps):
    """streamapp's cooperative join over aiokafka's steps."""


async def _join(coordinator: Coordinator, new: set[TP]) -> None:
    previous = coordinator._subscription.subscription.assignment
    await coordinator._on_join_prepare(previous)
    data = ConsumerProtocolMemberAssignment(
        0, [("t", sorted(tp.partition for tp in new))], b""
    ).encode()
    await coordinator._on_join_complete(5, "m", "streamapp", data)


OWNED = {TP("t", 0), TP("t", 1), TP("t", 2)}


async def test_cooperative_keeps_through_the_join_and_revokes_only_what_it_lost() -> None:
    coordinator = Coordinator(MarkingAssignor(), OWNED)
    await _join(coordinator, {TP("t", 0), TP("t", 1)})
    assert coordinator.listener.calls == [
        ("revoked", {TP("t", 2)}),  # after the SyncGroup, only the lost partition
        ("assigned", {TP("t", 0), TP("t", 1)}),
    ]
    assert coordinator._assignors[0].prepared == [True]
    assert coordinator.rejoins == 1  # the lost partition's new owner gets it in the next round


async def test_cooperative_with_nothing_lost_does_not_rejoin() -> None:
    coordinator = Coordinator(MarkingAssignor(), OWNED)
    await _join(coordinator, OWNED | {TP("t", 3)})
    assert coordinator.listener.calls == [("revoked", set()), ("assigned", OWNED | {TP("t", 3)})]
    assert coordinator.rejoins == 0


async def test_records_are_handed_out_during_a_cooperative_join_only() -> None:
    # aiokafka's fetcher hands out nothing while ``reassignment_in_progress``: an eager join
    # must set it (everything is revoked), a cooperative one must not (the kept partitions
    # go on being processed until the SyncGroup answers).
    seen: dict[str, bool] = {}

    class BeginningSteps(AiokafkaSteps):
        async def _on_join_prepare(self, previous: Any) -> None:
            self._subscription.begin_reassignment()  # what aiokafka's own prepare does first
            await self.listener.on_partitions_revoked(previous.tps if previous else set())

    class Beginning(CooperativeJoin, BeginningSteps):
        pass

    for keeps in (True, False):
        coordinator = Beginning(Assignor(keeps=keeps), OWNED)
        assert not coordinator._subscription.reassignment_in_progress
        previous = coordinator._subscription.subscription.assignment
        await coordinator._on_join_prepare(previous)
        seen["cooperative" if keeps else "eager"] = (
            coordinator._subscription.reassignment_in_progress
        )
    assert seen == {"cooperative": False, "eager": True}


async def test_a_member_whose_generation_was_reset_gives_everything_up_first() -> None:
    coordinator = Coordinator(Assignor(keeps=True), OWNED)
    coordinator.generation = -1  # fenced: others may hold its partitions already
    await _join(coordinator, {TP("t", 0)})
    assert coordinator.listener.calls == [("revoked", OWNED), ("assigned", {TP("t", 0)})]
    assert coordinator._assignors[0].prepared == [False]
    assert coordinator.rejoins == 0


async def test_eager_is_aiokafkas_path() -> None:
    coordinator = Coordinator(Assignor(keeps=False), OWNED)
    await _join(coordinator, {TP("t", 0)})
    assert coordinator.listener.calls == [("revoked", OWNED), ("assigned", {TP("t", 0)})]
    assert coordinator.rejoins == 0


async def test_kept_partitions_keep_their_position_and_pause_through_the_join() -> None:
    assignor = MarkingAssignor()
    coordinator = Coordinator(assignor, OWNED)
    assignment = coordinator._subscription.subscription.assignment
    assignment.state_value(TP("t", 0)).seek(120)
    assignment.state_value(TP("t", 1)).seek(7)
    assignment.state_value(TP("t", 1)).pause()
    await _join(coordinator, {TP("t", 0), TP("t", 1), TP("t", 3)})
    fresh = coordinator._subscription.subscription.assignment
    assert fresh is not assignment  # aiokafka's new state for every partition
    assert fresh.state_value(TP("t", 0)).position == 120
    assert not fresh.state_value(TP("t", 0)).paused
    assert fresh.state_value(TP("t", 1)).position == 7
    assert fresh.state_value(TP("t", 1)).paused
    assert not fresh.state_value(TP("t", 3)).has_valid_position  # gained: from its commit
    # Faust's handlers were told the join is incremental, for its two listener calls only.
    assert assignor.incremental == [True, False]
    assert "assign_from_subscribed" not in vars(coordinator._subscription)


async def test_a_join_taken_the_eager_way_revokes_everything_and_gets_every_state_afresh() -> None:
    # During an eager rebalance's recovery Faust's handlers take a cooperative join the eager
    # way: its revocation empties the changelog queue, and only recovery's next pass seeks the
    # changelogs. A kept changelog's position carried over stayed past the records that queue
    # held (never applied), and a newcomer's global table lacked them for good. And told only
    # what was lost, Faust kept the kept partitions' read marks, below which its fetch loop
    # drops records: the changelogs, read afresh from their start, lost their first records.
    assignor = MarkingAssignor(eager_pending=True)
    coordinator = Coordinator(assignor, OWNED)
    assignment = coordinator._subscription.subscription.assignment
    assignment.state_value(TP("t", 0)).seek(120)
    assignment.state_value(TP("t", 1)).seek(7)
    await _join(coordinator, {TP("t", 0), TP("t", 1), TP("t", 3)})
    fresh = coordinator._subscription.subscription.assignment
    for p in (0, 1, 3):
        assert not fresh.state_value(TP("t", p)).has_valid_position, p  # sought by recovery
    assert coordinator.listener.calls == [
        ("revoked", OWNED),  # everything, as an eager join revokes
        ("assigned", {TP("t", 0), TP("t", 1), TP("t", 3)}),
    ]
    assert coordinator.rejoins == 1  # what it lost goes to its new owner in the next round
    assert assignor.incremental == [True, False]
