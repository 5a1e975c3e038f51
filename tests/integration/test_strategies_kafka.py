"""The classic strategies on a real broker, through plain aiokafka consumers.

Per strategy: three `AIOKafkaConsumer`s in one group, each given one of our
assignor instances; one leaves; the assignments Kafka delivers (what each
consumer's `assignment()` and rebalance listener see) must honour the
strategy's guarantees. `cooperative-sticky` gets its own test of how it
behaves on aiokafka's eager protocol (see `assignor.aiokafka_assignors`):
partitions that change owner are withheld for one generation, a follow-up
rebalance is requested by the bound members, and a partition never passes
straight from one consumer to another. A member that misses a generation
(its SyncGroup came after the others' follow-up rejoin) still claims what it
held, so what moves from it is withheld once more, as under KIP-429.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from assignor.aiokafka_assignors import (
    CooperativeStickyAssignor,
    FairAssignor,
    JoinStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    StrategyAssignor,
)

PARTITIONS = 7  # per topic; 14 in all, so three members cannot split them evenly
SETTLE_TIMEOUT = 60.0
Assignment = frozenset[TopicPartition]


class Recorder(ConsumerRebalanceListener):
    """Every assignment a consumer was given, keyed by our generation (epoch)."""

    def __init__(self, assignor: StrategyAssignor) -> None:
        self.assignor = assignor
        self.by_epoch: dict[int, Assignment] = {}
        self.followup_at: dict[int, bool] = {}

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        return None

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        # on_assignment (the assignor) runs before this listener, so the
        # epoch it recorded is the one of this very assignment.
        epoch = self.assignor.last_assignment.generation
        self.by_epoch[epoch] = frozenset(assigned)
        self.followup_at[epoch] = self.assignor.last_assignment.followup


@dataclass
class Member:
    name: str
    consumer: AIOKafkaConsumer
    assignor: StrategyAssignor
    recorder: Recorder

    def held(self) -> Assignment:
        return frozenset(self.consumer.assignment())

    def epoch(self) -> int:
        return self.assignor.last_assignment.generation


@dataclass
class Group:
    bootstrap: str
    topics: list[str]
    make: Callable[[], StrategyAssignor]
    bind: bool = False
    group_id: str = field(default_factory=lambda: f"strategies-{uuid.uuid4().hex[:8]}")
    members: dict[str, Member] = field(default_factory=dict)

    @property
    def partitions(self) -> Assignment:
        return frozenset(TopicPartition(t, p) for t in self.topics for p in range(PARTITIONS))

    async def join(self, name: str) -> Member:
        assignor = self.make()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group_id,
            client_id=name,
            partition_assignment_strategy=(assignor,),
            heartbeat_interval_ms=300,
            session_timeout_ms=6000,
            enable_auto_commit=False,
        )
        if self.bind:
            assignor.bind(consumer)
        recorder = Recorder(assignor)
        await consumer.start()
        consumer.subscribe(self.topics, listener=recorder)
        member = Member(name, consumer, assignor, recorder)
        self.members[name] = member
        return member

    async def leave(self, name: str) -> None:
        await self.members.pop(name).consumer.stop()

    async def stop(self) -> None:
        for member in self.members.values():
            await member.consumer.stop()
        self.members.clear()

    def _settled_now(self) -> bool:
        members = list(self.members.values())
        epochs = {m.epoch() for m in members}
        held = [m.held() for m in members]
        union = frozenset().union(*held)
        return (
            len(epochs) == 1
            and min(epochs) >= 0
            and not any(m.assignor.last_assignment.followup for m in members)
            and sum(len(h) for h in held) == len(union)  # nobody shares a partition
            and union == self.partitions
        )

    async def settle(self) -> dict[str, Assignment]:
        """Wait until every member holds its share of one and the same final generation."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            if self._settled_now():
                snapshot = {n: m.held() for n, m in self.members.items()}
                epoch = next(iter(self.members.values())).epoch()
                # Still the same a moment later: no rebalance was under way.
                await asyncio.sleep(1.0)
                if self._settled_now() and all(m.epoch() == epoch for m in self.members.values()):
                    return snapshot
            await asyncio.sleep(0.1)
        state = {n: (m.epoch(), sorted(m.held())) for n, m in self.members.items()}
        raise AssertionError(f"group {self.group_id} did not settle: {state}")


async def create_topics(bootstrap: str, names: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(n, num_partitions=PARTITIONS, replication_factor=1) for n in names]
        )
    finally:
        await admin.close()


def counts(assignment: dict[str, Assignment]) -> list[int]:
    return sorted(len(a) for a in assignment.values())


def numbers(held: Assignment, topic: str) -> list[int]:
    return sorted(tp.partition for tp in held if tp.topic == topic)


def check_guarantees(strategy: str, topics: list[str], assignment: dict[str, Assignment]) -> None:
    """What each strategy promises for a group whose members subscribe alike."""
    if strategy == "range":
        for topic in topics:
            per_member = [numbers(a, topic) for a in assignment.values()]
            sizes = [len(ns) for ns in per_member]
            assert max(sizes) - min(sizes) <= 1
            for ns in per_member:  # one consecutive range per topic
                assert ns == list(range(ns[0], ns[0] + len(ns))) if ns else True
    elif strategy == "join-sticky":
        units = []
        for held in assignment.values():
            first = numbers(held, topics[0])
            assert all(numbers(held, t) == first for t in topics), "not co-partitioned"
            units.append(len(first))
        assert max(units) - min(units) <= 1
    else:
        sizes = counts(assignment)
        assert max(sizes) - min(sizes) <= 1


STRATEGIES: dict[str, Callable[[], StrategyAssignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "fair": FairAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
    "join-sticky": JoinStickyAssignor,
}
STICKY = {"sticky", "cooperative-sticky", "join-sticky"}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
async def test_three_consumers_then_one_leaves(kafka_bootstrap: str, strategy: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    topics = [f"{strategy}-a-{suffix}", f"{strategy}-b-{suffix}"]
    await create_topics(kafka_bootstrap, topics)
    group = Group(kafka_bootstrap, topics, STRATEGIES[strategy], bind=True)
    try:
        await asyncio.gather(*(group.join(n) for n in ("c1", "c2", "c3")))
        before = await group.settle()
        assert len(before) == 3
        check_guarantees(strategy, topics, before)
        assert all(m.assignor.name == f"streamapp-{strategy}" for m in group.members.values())

        await group.leave("c2")
        after = await group.settle()
        check_guarantees(strategy, topics, after)
        if strategy in STICKY:
            # Only the leaver's partitions moved.
            for name in ("c1", "c3"):
                assert before[name] <= after[name], name
            assert after["c1"] | after["c3"] == before["c1"] | before["c2"] | before["c3"]
    finally:
        await group.stop()


async def test_cooperative_sticky_withholds_moves_until_a_followup(kafka_bootstrap: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    topics = [f"coop-a-{suffix}", f"coop-b-{suffix}"]
    await create_topics(kafka_bootstrap, topics)
    group = Group(kafka_bootstrap, topics, CooperativeStickyAssignor, bind=True)
    try:
        await asyncio.gather(group.join("c1"), group.join("c2"))
        before = await group.settle()
        assert counts(before) == [7, 7]
        settled_epoch = group.members["c1"].epoch()

        # A third member joins: c1 and c2 must each give some partitions up.
        await group.join("c3")
        after = await group.settle()
        assert counts(after) == [4, 5, 5]
        for name in ("c1", "c2"):
            assert after[name] <= before[name]

        recorders = [m.recorder for m in group.members.values()]
        epochs = sorted({e for r in recorders for e in r.by_epoch})

        def holders(epoch: int) -> dict[TopicPartition, str]:
            """Who holds what as of `epoch`.

            A member whose SyncGroup failed (another rebalance began first)
            misses an epoch; it still owns what it was last given, which is
            also what it reports when it joins next.
            """
            found: dict[TopicPartition, str] = {}
            for member in group.members.values():
                known = [e for e in member.recorder.by_epoch if e <= epoch]
                if not known:
                    continue
                for tp in member.recorder.by_epoch[max(known)]:
                    assert tp not in found, f"{tp} held twice as of epoch {epoch}"
                    found[tp] = member.name
            return found

        def followup(epoch: int) -> bool:
            return any(r.followup_at.get(epoch) for r in recorders)

        def missed(epoch: int) -> bool:
            """Whether a member in the group before and after `epoch` never got its share of
            it: its SyncGroup came after the next rebalance had begun (the others' follow-up
            rejoin). Its metadata then still claims what it held before, and the leader
            withholds what moves from it a second time (KIP-429 does the same)."""
            return any(
                epoch not in r.by_epoch and min(r.by_epoch) < epoch < max(r.by_epoch)
                for r in recorders
                if r.by_epoch
            )

        withheld_epochs = []
        for previous, epoch in itertools.pairwise(epochs):
            old, new = holders(previous), holders(epoch)
            # The cooperative rule: never straight from one consumer to another.
            for tp, name in new.items():
                assert old.get(tp, name) == name, f"{tp} passed from {old[tp]} to {name} directly"
            if epoch > settled_epoch and followup(epoch):
                withheld_epochs.append(epoch)
                missing = group.partitions - new.keys()
                assert missing, "a follow-up was asked for, but nothing was withheld"
                assert missing <= old.keys(), "withheld a partition nobody owned"

        # The join withheld what had to move, and one follow-up handed it to c3; a move is
        # withheld again only after a round some member missed.
        assert withheld_epochs, "c3 joined without any partition being withheld"
        for withheld, again in itertools.pairwise(withheld_epochs):
            assert missed(withheld), (
                f"epoch {again} withheld a move again, no member missed {withheld}"
            )
        c3_by_epoch = group.members["c3"].recorder.by_epoch
        assert c3_by_epoch.get(withheld_epochs[0], frozenset()) == frozenset()
        last_withheld = withheld_epochs[-1]
        at_withheld, final = holders(last_withheld), holders(max(epochs))
        assert not followup(max(epochs))
        c3_at_withheld = {tp for tp, n in at_withheld.items() if n == "c3"}
        freed = group.partitions - at_withheld.keys()
        assert {tp for tp, n in final.items() if n == "c3"} == c3_at_withheld | freed
        assert {tp: n for tp, n in final.items() if n != "c3"} == {
            tp: n for tp, n in at_withheld.items() if n != "c3"
        }

        # A member leaving frees its partitions: they go at once, nothing is withheld.
        joined_epoch = max(epochs)
        await group.leave("c1")
        last = await group.settle()
        for name in ("c2", "c3"):
            assert after[name] <= last[name]
        assert not any(
            m.recorder.followup_at.get(e)
            for m in group.members.values()
            for e in m.recorder.by_epoch
            if e > joined_epoch
        )
    finally:
        await group.stop()
