"""The aiokafka adapters driven the way aiokafka's group coordinator drives them.

No broker here (that is tests/integration/test_strategies_kafka.py): the
members' metadata and the leader's assignments go through aiokafka's real
wire encoding, and the rounds of a rebalance are played by hand.
"""

from __future__ import annotations

import logging

import pytest
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocol,
    ConsumerProtocolMemberMetadata,
)

from assignor.aiokafka_assignors import (
    CooperativeStickyAssignor,
    FairAssignor,
    JoinStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    StrategyAssignor,
)
from assignor.strategies.userdata import decode_subscription

TopicPartitions = dict[str, set[int]]


class Cluster:
    """The one thing an assignor reads from aiokafka's ClusterMetadata."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self.topics.get(topic)
        return None if count is None else set(range(count))


def rebalance(
    cluster: Cluster,
    members: dict[str, StrategyAssignor],
    topics: dict[str, list[str]],
    garbage: dict[str, bytes] | None = None,
) -> dict[str, TopicPartitions]:
    """One JoinGroup/SyncGroup round; the first member (sorted) leads."""
    wire: dict[str, ConsumerProtocolMemberMetadata] = {}
    for member_id, assignor in members.items():
        metadata = assignor.metadata(topics[member_id])
        if garbage and member_id in garbage:
            metadata = ConsumerProtocolMemberMetadata(0, metadata.subscription, garbage[member_id])
        wire[member_id] = ConsumerProtocol.METADATA.decode(metadata.encode())
    leader = members[min(members)]
    assignments = leader.assign(cluster, wire)
    assert set(assignments) == set(members)
    delivered: dict[str, TopicPartitions] = {}
    for member_id, assignment in assignments.items():
        received = ConsumerProtocol.ASSIGNMENT.decode(assignment.encode())
        members[member_id].on_assignment(received)
        delivered[member_id] = {t: set(ps) for t, ps in received.assignment}
    return delivered


def flat(assignment: TopicPartitions) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


ALL_CLASSES = [
    RangeAssignor,
    RoundRobinAssignor,
    FairAssignor,
    StickyAssignor,
    CooperativeStickyAssignor,
    JoinStickyAssignor,
]


@pytest.mark.parametrize("cls", ALL_CLASSES)
def test_each_adapter_is_an_aiokafka_assignor_with_its_own_protocol_name(
    cls: type[StrategyAssignor],
) -> None:
    first, second = cls(), cls()
    assert isinstance(first, AbstractPartitionAssignor)
    assert first.name == f"streamapp-{cls.strategy}"
    # State is per instance: two consumers in one process do not share it.
    cluster = Cluster({"t": 4})
    rebalance(cluster, {"a": first}, {"a": ["t"]})
    assert decode_subscription(first.metadata(["t"]).user_data).owned == {"t": [0, 1, 2, 3]}
    assert decode_subscription(second.metadata(["t"]).user_data).owned == {}


def test_unknown_strategy_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown strategy 'stickiest'"):
        StrategyAssignor("stickiest")


def test_sticky_keeps_survivors_partitions_and_counts_generations() -> None:
    cluster = Cluster({"a": 6, "b": 6})
    topics = {m: ["a", "b"] for m in ("c1", "c2", "c3")}
    members: dict[str, StrategyAssignor] = {m: StickyAssignor() for m in topics}
    first = rebalance(cluster, members, topics)
    assert sorted(len(flat(a)) for a in first.values()) == [4, 4, 4]
    assert {m.last_assignment.generation for m in members.values()} == {0}

    del members["c2"]
    second = rebalance(cluster, members, topics)
    for member_id in members:
        assert flat(first[member_id]) <= flat(second[member_id])
    assert sorted(len(flat(a)) for a in second.values()) == [6, 6]
    assert {m.last_assignment.generation for m in members.values()} == {1}


def test_cooperative_withholds_moving_partitions_and_asks_for_one_followup() -> None:
    cluster = Cluster({"t": 6})
    topics = {m: ["t"] for m in ("c1", "c2", "c3")}
    followups: list[str] = []
    members: dict[str, StrategyAssignor] = {}
    for member_id in ("c1", "c2"):
        assignor = CooperativeStickyAssignor()
        assignor.on_followup(lambda member_id=member_id: followups.append(member_id))
        members[member_id] = assignor
    first = rebalance(cluster, members, topics)
    assert sorted(len(flat(a)) for a in first.values()) == [3, 3]
    assert followups == []

    # c3 joins: each of c1, c2 must give one partition up. This round those
    # two go to nobody; both members are told to rebalance again.
    members["c3"] = CooperativeStickyAssignor()
    second = rebalance(cluster, members, topics)
    leader = members["c1"]
    assert leader.last_outcome is not None
    revoking = {
        m: flat({t: set(ps) for t, ps in r.items()})
        for m, r in leader.last_outcome.revoking.items()
    }
    assert sorted(len(r) for r in revoking.values()) == [1, 1]
    assert second["c3"] == {}
    for member_id in ("c1", "c2"):
        assert flat(second[member_id]) == flat(first[member_id]) - revoking[member_id]
    assert sorted(followups) == ["c1", "c2"]

    # The follow-up: the withheld partitions go to c3, nothing else moves.
    third = rebalance(cluster, members, topics)
    assert flat(third["c3"]) == revoking["c1"] | revoking["c2"]
    for member_id in ("c1", "c2"):
        assert flat(third[member_id]) == flat(second[member_id])
    assert sorted(followups) == ["c1", "c2"]  # settled: no further request
    assert leader.last_outcome is not None and leader.last_outcome.followup_rebalance is False


def test_cooperative_without_any_bound_member_withholds_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster({"t": 6})
    topics = {m: ["t"] for m in ("c1", "c2", "c3")}
    members: dict[str, StrategyAssignor] = {m: CooperativeStickyAssignor() for m in ("c1", "c2")}
    first = rebalance(cluster, members, topics)
    members["c3"] = CooperativeStickyAssignor()
    with caplog.at_level(logging.WARNING, logger="assignor.aiokafka_assignors"):
        second = rebalance(cluster, members, topics)
    assert sorted(len(flat(a)) for a in second.values()) == [2, 2, 2]
    for member_id in ("c1", "c2"):
        assert flat(second[member_id]) <= flat(first[member_id])
    assert "no member of the group can start a follow-up rebalance" in caplog.text


@pytest.mark.parametrize(
    ("payload", "cause"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"v": 7}', "version must be 1"),
        (b'{"v": 1, "generation": "x"}', "generation must be an integer"),
        (b'{"v": 1, "owned": {"t": [-1]}}', "owned.t must be a list of partition numbers"),
    ],
)
def test_garbage_user_data_is_named_and_the_member_treated_as_fresh(
    payload: bytes, cause: str, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = Cluster({"t": 4})
    topics = {"c1": ["t"], "c2": ["t"]}
    members: dict[str, StrategyAssignor] = {m: StickyAssignor() for m in topics}
    first = rebalance(cluster, members, topics)
    with caplog.at_level(logging.WARNING, logger="assignor.aiokafka_assignors"):
        second = rebalance(cluster, members, topics, garbage={"c2": payload})
    assert "member c2 sent unreadable user data" in caplog.text
    assert cause in caplog.text
    # c2 counts as fresh: it owns nothing, c1 keeps its own, all four are placed.
    assert flat(first["c1"]) == flat(second["c1"])
    assert len(flat(second["c1"]) | flat(second["c2"])) == 4


def test_join_sticky_epochs_defeat_a_zombie_claim() -> None:
    cluster = Cluster({"impressions": 4, "clicks": 4})
    topics = {m: ["clicks", "impressions"] for m in ("a", "b", "zombie")}
    zombie = JoinStickyAssignor()
    # Epoch 0: the zombie-to-be holds everything alone.
    alone = rebalance(cluster, {"zombie": zombie}, topics)
    assert len(flat(alone["zombie"])) == 8
    # It drops out unnoticed; a and b form a new group (epochs 0, then 1).
    members: dict[str, StrategyAssignor] = {"a": JoinStickyAssignor(), "b": JoinStickyAssignor()}
    rebalance(cluster, members, topics)
    settled = rebalance(cluster, members, topics)
    assert {m.last_assignment.generation for m in members.values()} == {1}
    for assignment in settled.values():
        assert assignment["impressions"] == assignment["clicks"]
    # The zombie comes back still claiming all of epoch 0's partitions.
    members["zombie"] = zombie
    third = rebalance(cluster, members, topics)
    for member_id in ("a", "b"):
        kept = flat(settled[member_id]) & flat(third[member_id])
        assert len(kept) == min(len(flat(settled[member_id])), len(flat(third[member_id])))
        assert not flat(third["zombie"]) & kept
    assert {m.last_assignment.generation for m in members.values()} == {2}
