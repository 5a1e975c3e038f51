"""A stateless task never displaces a stateful one (design invariant; plan rules 5 and 6).

Faust's one-partition leader topic (``<app>-__assignor-__leader``) is a stateless group of its
own. It once counted in the overall balance like any task, so a returning worker could be given
a stateful partition it held no state for while another member kept the free-to-move leader
partition: the returning worker then replayed that partition from scratch.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignor import plan
from tests.paths import SCENARIOS

DATA = SCENARIOS
SOURCE = "counts-source"
CHANGELOG = "counter-counts-changelog"
LEADER = "counter-__assignor-__leader"

Scenario = dict[str, Any]
Result = dict[str, Any]


def test_a_returning_worker_gets_its_own_partitions_back_beside_the_leader_topic() -> None:
    """The live rolling restart of 3 workers over 8 partitions, reconstructed."""
    scenario = json.loads((DATA / "rolling-restart-with-leader-topic.json").read_text())
    result = plan(scenario)
    members = result["members"]
    assert members["m-w1-restarted"]["active"][SOURCE] == [0, 1]
    assert members["m-w1-restarted"]["active"][CHANGELOG] == [0, 1]
    # The leader partition is what moves to make the counts even, not a stateful one.
    assert members["m-w1-restarted"]["active"][LEADER] == [0]
    # w2 and w3 keep what they held apart from w1's two partitions.
    assert members["m-w2"]["active"][SOURCE] == [2, 3, 4]
    assert members["m-w3"]["active"][SOURCE] == [5, 6, 7]
    assert LEADER not in members["m-w2"]["active"]
    assert result["followup_rebalance"] is False


def test_without_the_leader_topic_the_same_worker_gets_the_same_partitions() -> None:
    scenario = json.loads((DATA / "rolling-restart-with-leader-topic.json").read_text())
    del scenario["topics"][LEADER]
    result = plan(scenario)
    assert result["members"]["m-w1-restarted"]["active"][SOURCE] == [0, 1]


# --------------------------------------------------------------------------- the property


@st.composite
def restarts(draw: st.DrawFn) -> tuple[Scenario, str]:
    """A steady group of uniform members, one stateful group and any stateless groups.

    Returns the scenario in which one member comes back from a restart: it reports its old
    claims at its old generation and caught-up offsets for what it held, while the others have
    held the group without it for one generation.
    """
    partitions = draw(st.integers(1, 12))
    topics = {SOURCE: partitions, CHANGELOG: partitions}
    for i in range(draw(st.integers(0, 3))):
        topics[f"stateless-{i}"] = draw(st.integers(1, 12))
    if draw(st.booleans()):
        topics[LEADER] = 1
    size = draw(st.integers(2, 6))
    ends = {str(p): draw(st.integers(0, 5_000)) for p in range(partitions)}
    members = {
        f"m{i}": {
            "client_id": f"c{i}",
            "host": f"h{i}",
            "subscription": sorted(topics),
            "generation": 1,
        }
        for i in range(size)
    }
    base: Scenario = {
        "topics": topics,
        "changelog_topics": [CHANGELOG],
        "num_standbys": draw(st.integers(0, 1)),
        "acceptable_recovery_lag": 200,
        "members": members,
        "end_offsets": {CHANGELOG: ends},
    }
    steady = settle(base)
    leaver = draw(st.sampled_from(sorted(members)))
    without = copy.deepcopy(steady)
    gone = without["members"].pop(leaver)
    after_leave = applied(plan(without), without)
    back = copy.deepcopy(after_leave)
    back["members"][f"{leaver}-restarted"] = gone  # its old claims, at its old generation
    return back, leaver


def settle(scenario: Scenario) -> Scenario:
    """Rebalance until the plan asks for no follow-up: the group's steady state."""
    current = scenario
    for _ in range(6):
        result = plan(current)
        current = applied(result, current)
        if not result["followup_rebalance"]:
            return current
    raise AssertionError("the plan did not settle in 6 rounds")


def applied(result: Result, scenario: Scenario) -> Scenario:
    """The next rebalance's scenario: the result in force, every replica caught up."""
    nxt = copy.deepcopy(scenario)
    ends = scenario["end_offsets"][CHANGELOG]
    for member_id, member in nxt["members"].items():
        share = result["members"][member_id]
        member["generation"] = member.get("generation", -1) + 1
        member["owned_active"] = copy.deepcopy(share["active"])
        member["owned_standby"] = copy.deepcopy(share["standby"])
        held = (
            set(share["active"].get(CHANGELOG, []))
            | set(share["standby"].get(CHANGELOG, []))
            | set(share["warmup"].get(CHANGELOG, []))
        )
        member["offsets"] = {CHANGELOG: {str(p): ends[str(p)] for p in sorted(held)}}
    return nxt


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(restarts())
def test_a_returning_member_gets_only_its_own_stateful_tasks_back(
    case: tuple[Scenario, str],
) -> None:
    scenario, leaver = case
    returning = scenario["members"][f"{leaver}-restarted"]
    own = set(returning["owned_active"].get(CHANGELOG, []))
    result = plan(scenario)
    got = set(result["members"][f"{leaver}-restarted"]["active"].get(CHANGELOG, []))
    assert got <= own, f"given {sorted(got - own)}, which it holds no state for"
    # Balance allows at least the floor share of the stateful group back.
    floor = scenario["topics"][CHANGELOG] // len(scenario["members"])
    assert len(got) >= min(floor, len(own))
