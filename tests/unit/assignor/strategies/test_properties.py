"""Hypothesis properties of every classic strategy, through `assignor.plan`.

Validity and determinism for all; then each strategy's own guarantees: Kafka's
semantics for range and roundrobin (checked against aiokafka's own ports),
KIP-49's greedy balance, KIP-54's balance and stickiness, the cooperative
rules (nothing revoked and handed over in one round, convergence within two
follow-ups, as in Kafka's CooperativeStickyAssignorTest), KIP-315's
co-partitioning, fair shares and stickiness.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable
from typing import Any

from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from assignor import plan

# Per test, not a global profile: other suites keep their own settings.
# STRATEGY_EXAMPLES lets a developer dig deeper locally; CI keeps the default.
EXAMPLES = int(os.environ.get("STRATEGY_EXAMPLES", "100"))
thorough = settings(max_examples=EXAMPLES, deadline=None)

ALL = ["range", "roundrobin", "fair", "sticky", "cooperative-sticky", "join-sticky"]

Scenario = dict[str, Any]
Result = dict[str, Any]
Pairs = set[tuple[str, int]]


# --------------------------------------------------------------------------- scenarios


@st.composite
def scenarios(draw: st.DrawFn, uniform: bool | None = None, owned: bool = True) -> Scenario:
    """Small groups: up to 4 topics of up to 8 partitions, up to 6 members.

    Previous ownership is a random owner per partition: nobody, a member that
    left, or a current member (even one no longer subscribed), with random
    generations and the odd second claimant, so stale and conflicting claims
    are exercised too.
    """
    topics = {f"t{i}": draw(st.integers(1, 8)) for i in range(draw(st.integers(1, 4)))}
    names = sorted(topics)
    alike = draw(st.booleans()) if uniform is None else uniform
    member_ids = [f"m{i}" for i in range(draw(st.integers(1, 6)))]
    members: dict[str, dict[str, Any]] = {}
    for member_id in member_ids:
        subscription = (
            names
            if alike
            else draw(
                st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True)
            )
        )
        members[member_id] = {"subscription": sorted(subscription)}
    if owned:
        for member_id in member_ids:
            members[member_id]["generation"] = draw(st.integers(-1, 3))
        owners = st.sampled_from([None, "gone", *member_ids])
        for topic, count in topics.items():
            for partition in range(count):
                for _ in range(draw(st.sampled_from([1, 1, 1, 2]))):
                    owner = draw(owners)
                    if owner in members:
                        claims = members[owner].setdefault("owned_active", {})
                        if partition not in claims.setdefault(topic, []):
                            claims[topic].append(partition)
    return {"topics": topics, "members": members}


def shuffled(scenario: Scenario) -> Scenario:
    """The same facts with every mapping and list in another order."""
    members = {}
    for member_id in reversed(list(scenario["members"])):
        member = copy.deepcopy(scenario["members"][member_id])
        member["subscription"] = list(reversed(member["subscription"]))
        owned = member.get("owned_active", {})
        member["owned_active"] = {t: list(reversed(ps)) for t, ps in reversed(list(owned.items()))}
        members[member_id] = member
    topics = dict(reversed(list(scenario["topics"].items())))
    return {"topics": topics, "members": members}


def next_round(scenario: Scenario, result: Result, leave: Iterable[str] = ()) -> Scenario:
    """The scenario of the next rebalance: everyone reports what it was given."""
    gone = set(leave)
    generation = max((m.get("generation", -1) for m in scenario["members"].values()), default=-1)
    members = {
        member_id: {
            "subscription": member["subscription"],
            "generation": generation + 1,
            "owned_active": result["members"][member_id]["active"],
        }
        for member_id, member in scenario["members"].items()
        if member_id not in gone
    }
    return {"topics": scenario["topics"], "members": members}


# --------------------------------------------------------------------------- facts


def pairs(by_topic: dict[str, list[int]]) -> Pairs:
    return {(t, p) for t, ps in by_topic.items() for p in ps}


def active(result: Result, member_id: str) -> Pairs:
    return pairs(result["members"][member_id]["active"])


def loads(result: Result) -> dict[str, int]:
    return {m: len(active(result, m)) for m in result["members"]}


def subscribed(scenario: Scenario) -> Pairs:
    topics = {t for m in scenario["members"].values() for t in m["subscription"]}
    return {(t, p) for t, n in scenario["topics"].items() if t in topics for p in range(n)}


def subscribers(scenario: Scenario, topic: str) -> list[str]:
    return [m for m, member in scenario["members"].items() if topic in member["subscription"]]


def valid_claims(scenario: Scenario) -> dict[tuple[str, int], str]:
    """Partition -> previous owner, as the contract resolves claims."""
    best: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for member_id, member in scenario["members"].items():
        for tp in pairs(member.get("owned_active", {})):
            best.setdefault(tp, []).append((member.get("generation", -1), member_id))
    owner: dict[tuple[str, int], str] = {}
    for tp, claims in best.items():
        top = max(g for g, _ in claims)
        winners = [m for g, m in claims if g == top]
        topic = tp[0]
        if len(winners) == 1 and topic in scenario["members"][winners[0]]["subscription"]:
            owner[tp] = winners[0]
    return owner


def assert_valid(scenario: Scenario, result: Result, *, complete: bool = True) -> None:
    """Each partition at most once, only to subscribers; all of them unless withheld."""
    seen: Pairs = set()
    for member_id in scenario["members"]:
        mine = active(result, member_id)
        assert not mine & seen, "a partition is active on two members"
        seen |= mine
        subscription = set(scenario["members"][member_id]["subscription"])
        assert {t for t, _ in mine} <= subscription, "a partition went to a non-subscriber"
    revoking: Pairs = set()
    for by_topic in result["revoking"].values():
        revoking |= pairs(by_topic)
    assert not revoking & seen, "a partition is revoked and assigned in one round"
    unassigned = pairs(result["unassigned"])
    everything = {(t, p) for t, n in scenario["topics"].items() for p in range(n)}
    assert seen | revoking | unassigned == everything
    if complete:
        assert seen | revoking == subscribed(scenario)
    assert set(result["members"]) == set(scenario["members"])


def assert_kip54_balanced(scenario: Scenario, result: Result) -> None:
    """No partition can move to an eligible member holding two or more fewer."""
    load = loads(result)
    for member_id in scenario["members"]:
        for topic, _ in active(result, member_id):
            for other in subscribers(scenario, topic):
                assert load[other] >= load[member_id] - 1, (member_id, other, topic)


def assert_within_one(result: Result) -> None:
    counts = loads(result).values()
    assert max(counts) - min(counts) <= 1


# --------------------------------------------------------------------------- all strategies


@thorough
@given(st.sampled_from(ALL), scenarios())
def test_valid_and_deterministic(strategy: str, scenario: Scenario) -> None:
    result = plan(scenario, strategy=strategy)
    assert_valid(scenario, result, complete=strategy != "join-sticky")
    assert plan(shuffled(scenario), strategy=strategy) == result


# --------------------------------------------------------------------------- range, roundrobin


class _Cluster:
    """Just the cluster facts aiokafka's assignors read: partitions per topic."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self.topics.get(topic)
        return None if count is None else set(range(count))


@thorough
@given(st.sampled_from(["range", "roundrobin"]), scenarios(owned=False))
def test_baselines_match_kafkas_semantics_as_ported_by_aiokafka(
    strategy: str, scenario: Scenario
) -> None:
    peer = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[strategy]
    members = {
        m: ConsumerProtocolMemberMetadata(0, member["subscription"], b"")
        for m, member in scenario["members"].items()
    }
    theirs = peer.assign(_Cluster(scenario["topics"]), members)
    result = plan(scenario, strategy=strategy)
    for member_id, assignment in theirs.items():
        expected = {(t, p) for t, ps in assignment.assignment for p in ps}
        assert active(result, member_id) == expected


# --------------------------------------------------------------------------- fair


@thorough
@given(scenarios(owned=False))
def test_fair_each_partition_went_to_a_least_loaded_eligible_member(scenario: Scenario) -> None:
    result = plan(scenario, strategy="fair")
    assert_valid(scenario, result)
    # Replay KIP-49's order: the member holding each partition had the least
    # load among the topic's subscribers when the partition was placed.
    owner = {tp: m for m in result["members"] for tp in active(result, m)}
    topics = {t for t, _ in owner}
    order = sorted(
        topics,
        key=lambda t: (len(subscribers(scenario, t)), -scenario["topics"][t], t),
    )
    load = dict.fromkeys(scenario["members"], 0)
    for topic in order:
        for partition in range(scenario["topics"][topic]):
            holder = owner[(topic, partition)]
            assert load[holder] == min(load[m] for m in subscribers(scenario, topic))
            load[holder] += 1


@thorough
@given(scenarios(uniform=True, owned=False))
def test_fair_is_within_one_when_subscriptions_are_alike(scenario: Scenario) -> None:
    assert_within_one(plan(scenario, strategy="fair"))


# --------------------------------------------------------------------------- sticky


@thorough
@given(scenarios())
def test_sticky_is_balanced_by_kip54s_definition(scenario: Scenario) -> None:
    result = plan(scenario, strategy="sticky")
    assert_kip54_balanced(scenario, result)
    if len({tuple(m["subscription"]) for m in scenario["members"].values()}) == 1:
        assert_within_one(result)


@thorough
@given(scenarios())
def test_sticky_returns_its_own_assignment_when_nothing_changed(scenario: Scenario) -> None:
    result = plan(scenario, strategy="sticky")
    again = plan(next_round(scenario, result), strategy="sticky")
    assert again["members"] == result["members"]
    assert again["stats"]["moved_active"] == 0


@thorough
@given(scenarios(uniform=True), st.data())
def test_sticky_member_leaving_a_balanced_group_moves_only_its_partitions(
    scenario: Scenario, data: st.DataObject
) -> None:
    assume(len(scenario["members"]) >= 2)
    settled = plan(scenario, strategy="sticky")
    gone = data.draw(st.sampled_from(sorted(scenario["members"])))
    after = plan(next_round(scenario, settled, leave=[gone]), strategy="sticky")
    for member_id in after["members"]:
        assert active(settled, member_id) <= active(after, member_id)
    assert_within_one(after)


@thorough
@given(st.sampled_from(["range", "roundrobin", "fair"]), scenarios(owned=False))
def test_sticky_keeps_any_previous_assignment_that_is_already_balanced(
    baseline: str, scenario: Scenario
) -> None:
    """Stickiness yields only to balance: a balanced previous assignment stays as it is."""
    previous = plan(scenario, strategy=baseline)
    current = next_round(scenario, previous)
    result = plan(current, strategy="sticky")
    try:
        assert_kip54_balanced(scenario, previous)
    except AssertionError:
        # Balance had to win: the answer is balanced, and every member kept at
        # least as much of its own as its final share allows.
        assert_kip54_balanced(current, result)
        return
    assert result["members"] == previous["members"]


# --------------------------------------------------------------------------- cooperative-sticky


@thorough
@given(scenarios())
def test_cooperative_never_hands_over_a_partition_its_owner_still_holds(
    scenario: Scenario,
) -> None:
    result = plan(scenario, strategy="cooperative-sticky")
    assert_valid(scenario, result)
    claims = valid_claims(scenario)
    for member_id in result["members"]:
        for tp in active(result, member_id):
            assert claims.get(tp, member_id) == member_id, "handed over before revocation"
    for member_id, by_topic in result["revoking"].items():
        assert all(claims.get(tp) == member_id for tp in pairs(by_topic))
    assert result["followup_rebalance"] == bool(result["revoking"])


@thorough
@given(scenarios(), st.data())
def test_cooperative_converges_within_two_followups(
    scenario: Scenario, data: st.DataObject
) -> None:
    current = scenario
    result = plan(current, strategy="cooperative-sticky")
    followups = 0
    while result["followup_rebalance"]:
        followups += 1
        assert followups <= 2, "did not converge within two follow-up rebalances"
        current = next_round(current, result)
        result = plan(current, strategy="cooperative-sticky")
        assert_valid(current, result)
    assert result["revoking"] == {}
    assert_kip54_balanced(current, result)
    # Settled: the cooperative answer is the sticky one.
    assert plan(current, strategy="sticky")["members"] == result["members"]
    # And a member leaving a settled group needs no follow-up when subscriptions are alike.
    if (
        len(current["members"]) >= 2
        and len({tuple(m["subscription"]) for m in current["members"].values()}) == 1
    ):
        gone = data.draw(st.sampled_from(sorted(current["members"])))
        after = plan(next_round(current, result, leave=[gone]), strategy="cooperative-sticky")
        assert after["followup_rebalance"] is False


# --------------------------------------------------------------------------- join-sticky


def _units(scenario: Scenario, result: Result) -> tuple[int, dict[str, set[int]]]:
    topics = {t for m in scenario["members"].values() for t in m["subscription"]}
    count = min(scenario["topics"][t] for t in topics)
    units = {m: {p for _, p in active(result, m)} for m in result["members"]}
    return count, units


@thorough
@given(scenarios())
def test_join_sticky_copartitions_and_shares_fairly(scenario: Scenario) -> None:
    result = plan(scenario, strategy="join-sticky")
    count, units = _units(scenario, result)
    for member_id, numbers in units.items():
        subscription = scenario["members"][member_id]["subscription"]
        for topic in subscription:
            assert {p for t, p in active(result, member_id) if t == topic} == numbers
        assert all(p < count for p in numbers)
    shares = [len(u) for u in units.values()]
    assert max(shares) - min(shares) <= 1
    assert sum(shares) == count
    # Left over: the partitions beyond the smallest topic, and (KIP-315's step
    # 5, uneven subscriptions) partition p of a topic whose holder of number p
    # does not consume it.
    assigned = set().union(*(active(result, m) for m in result["members"]))
    holder = {p: m for m, numbers in units.items() for p in numbers}
    for topic, partition in subscribed(scenario) - assigned:
        if partition < count:
            assert topic not in scenario["members"][holder[partition]]["subscription"]
    if len({tuple(m["subscription"]) for m in scenario["members"].values()}) == 1:
        assert subscribed(scenario) - assigned == {
            (t, p) for t, p in subscribed(scenario) if p >= count
        }


@thorough
@given(scenarios(uniform=True), st.data())
def test_join_sticky_member_leaving_moves_only_its_numbers(
    scenario: Scenario, data: st.DataObject
) -> None:
    assume(len(scenario["members"]) >= 2)
    settled = plan(scenario, strategy="join-sticky")
    again = plan(next_round(scenario, settled), strategy="join-sticky")
    assert again["members"] == settled["members"]
    gone = data.draw(st.sampled_from(sorted(scenario["members"])))
    after = plan(next_round(scenario, settled, leave=[gone]), strategy="join-sticky")
    for member_id in after["members"]:
        assert active(settled, member_id) <= active(after, member_id)


@thorough
@given(scenarios(uniform=True))
def test_join_sticky_higher_epoch_wins(scenario: Scenario) -> None:
    settled = plan(scenario, strategy="join-sticky")
    current = next_round(scenario, settled)
    holders = sorted(m for m in settled["members"] if active(settled, m))
    assume(holders)
    victim = holders[0]
    # A zombie from the epoch before still reports the victim's partitions.
    current["members"]["zombie"] = {
        "subscription": scenario["members"][victim]["subscription"],
        "generation": current["members"][victim]["generation"] - 1,
        "owned_active": settled["members"][victim]["active"],
    }
    result = plan(current, strategy="join-sticky")
    _, before = _units(scenario, settled)
    _, after = _units(current, result)
    # The victim's claim outranks the zombie's: it keeps all of its numbers
    # its (possibly smaller, now that the group grew) share allows.
    assert len(before[victim] & after[victim]) == min(len(before[victim]), len(after[victim]))
