"""Membership changes converge to a stable, balanced assignment within a bound.

Modelled on Kafka Streams' TaskAssignorConvergenceTest: a group lives through
a random sequence of events (a member leaves, a member restarts under a new
member id with its state on disk, an empty member joins). After each event it
rebalances, applying every result (standbys and warmups catch up between
rounds), until a result asks for no follow-up.

The bound: every follow-up round started by warmups moves at least one
held-back task onto a member that has caught up meanwhile, and at most
``max_warmup_replicas`` warm up per round, so with ``T`` stateful tasks the
group settles within ``ceil(T / max_warmup_replicas) + 2`` rounds per event
(one to decide, one spare); the cooperative protocol needs at most one extra
round per round to revoke, so twice that.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from assignor import plan

Scenario = dict[str, Any]
Result = dict[str, Any]


def topology(draw: st.DrawFn) -> tuple[dict[str, int], list[str]]:
    topics: dict[str, int] = {}
    changelogs: list[str] = []
    for i in range(draw(st.integers(1, 2))):
        count = draw(st.integers(1, 12))
        topics[f"s{i}"] = count
        if draw(st.booleans()) or i == 0:
            topics[f"s{i}-changelog"] = count
            changelogs.append(f"s{i}-changelog")
    return topics, changelogs


@st.composite
def lives(draw: st.DrawFn) -> tuple[Scenario, list[tuple[str, int]]]:
    topics, changelogs = topology(draw)
    members = {
        f"m{i}": {"client_id": f"c{i}", "host": f"h{i}", "subscription": sorted(topics)}
        for i in range(draw(st.integers(1, 6)))
    }
    scenario: Scenario = {
        "topics": topics,
        "changelog_topics": changelogs,
        "num_standbys": draw(st.integers(0, 1)),
        "acceptable_recovery_lag": draw(st.sampled_from([0, 100])),
        "max_warmup_replicas": draw(st.integers(1, 2)),
        "protocol": draw(st.sampled_from(["eager", "cooperative"])),
        "end_offsets": {c: {str(p): 1_000 for p in range(topics[c])} for c in changelogs},
        "members": members,
    }
    events = draw(
        st.lists(
            st.tuples(st.sampled_from(["leave", "restart", "join"]), st.integers(0, 99)),
            min_size=1,
            max_size=6,
        )
    )
    return scenario, events


def apply(result: Result, scenario: Scenario) -> Scenario:
    """The next round: the result in force, every replica caught up meanwhile."""
    nxt = copy.deepcopy(scenario)
    ends = scenario["end_offsets"]
    for member_id, member in nxt["members"].items():
        share = result["members"][member_id]
        member["generation"] = member.get("generation", 0) + 1
        member["owned_active"] = copy.deepcopy(share["active"])
        member["owned_standby"] = copy.deepcopy(share["standby"])
        # Members report what they replayed as warmups, as a worker's join metadata does.
        member["owned_warmup"] = copy.deepcopy(share["warmup"])
        offsets = member.setdefault("offsets", {})
        for placement in (share["active"], share["standby"], share["warmup"]):
            for topic, partitions in placement.items():
                if topic in ends:
                    for p in partitions:
                        offsets.setdefault(topic, {})[str(p)] = ends[topic][str(p)]
    return nxt


def happen(scenario: Scenario, event: tuple[str, int], serial: int) -> Scenario:
    kind, pick = event
    nxt = copy.deepcopy(scenario)
    members = nxt["members"]
    ids = sorted(members)
    if kind == "join" or not ids:
        members[f"joined-{serial}"] = {
            "client_id": f"joined-{serial}",
            "host": f"hj{serial}",
            "subscription": sorted(nxt["topics"]),
        }
    elif kind == "leave":
        del members[ids[pick % len(ids)]]
    else:  # restart: same client and disk, new member id, owns nothing
        old_id = ids[pick % len(ids)]
        old = members.pop(old_id)
        members[f"{old_id}-r{serial}"] = {
            "client_id": old["client_id"],
            "host": old["host"],
            "subscription": old["subscription"],
            "offsets": old.get("offsets", {}),
        }
    return nxt


def bound(scenario: Scenario) -> int:
    stateful = sum(scenario["topics"][c] for c in scenario["changelog_topics"])
    rounds = math.ceil(stateful / scenario["max_warmup_replicas"]) + 2
    return rounds * (2 if scenario.get("protocol") == "cooperative" else 1)


def assert_stable_and_balanced(result: Result) -> None:
    stats = result["stats"]
    assert result["followup_rebalance"] is False
    assert result["revoking"] == {}
    assert stats["warmups"] == 0
    assert stats["standbys_missing"] == 0
    assert stats["max_active_spread"] <= 1
    assert stats["max_group_active_spread"] <= 1
    assert stats["max_standby_spread"] <= 1


def settle(scenario: Scenario) -> tuple[Scenario, Result, int]:
    limit = bound(scenario)
    for rounds in range(1, limit + 1):
        result = plan(scenario)
        scenario = apply(result, scenario)
        if not result["followup_rebalance"]:
            return scenario, result, rounds
    raise AssertionError(f"no stable assignment within {limit} rounds")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lives())
def test_membership_changes_converge_within_the_bound(life: tuple[Scenario, list[Any]]) -> None:
    scenario, events = life
    scenario, result, _ = settle(scenario)
    assert_stable_and_balanced(result)
    for serial, event in enumerate(events):
        scenario = happen(scenario, event, serial)
        scenario, result, _ = settle(scenario)
        assert_stable_and_balanced(result)
        # Stable means stable: one more round changes nothing.
        assert plan(scenario)["members"] == result["members"]


def test_scale_out_by_warmups_takes_the_rounds_the_bound_allows() -> None:
    """Three loaded workers, one empty joiner, one warmup at a time: the joiner
    gets its share one task per round, which is what the bound counts."""
    topics = {"s0": 6, "s0-changelog": 6}
    scenario: Scenario = {
        "topics": topics,
        "changelog_topics": ["s0-changelog"],
        "num_standbys": 0,
        "acceptable_recovery_lag": 0,
        "max_warmup_replicas": 1,
        "end_offsets": {"s0-changelog": {str(p): 500 for p in range(6)}},
        "members": {
            f"m{i}": {"client_id": f"c{i}", "subscription": sorted(topics)} for i in range(2)
        },
    }
    scenario, _, _ = settle(scenario)
    scenario = happen(scenario, ("join", 0), 0)
    scenario, result, rounds = settle(scenario)
    assert_stable_and_balanced(result)
    joiner = result["members"]["joined-0"]["active"]["s0"]
    assert len(joiner) == 2
    assert rounds == 3  # two warmups, one at a time, then the settled round
    assert rounds <= bound(scenario)


def test_the_followup_moves_the_task_that_was_held_back() -> None:
    """The follow-up of a warmup moves the task held back for it, not another task of the same
    owner whose standby the target also holds (both can move without a replay; only one was
    warmed up for, and the standby would have to be placed again)."""
    topics = {"s0": 4, "s0-changelog": 4}
    ends = {str(p): 500 for p in range(4)}
    scenario: Scenario = {
        "topics": topics,
        "changelog_topics": ["s0-changelog"],
        "num_standbys": 1,
        "acceptable_recovery_lag": 0,
        "end_offsets": {"s0-changelog": ends},
        "members": {
            # a owns three tasks; task 1 was held back on it for b last round.
            "a": {
                "client_id": "a",
                "subscription": sorted(topics),
                "generation": 5,
                "owned_active": {"s0": [0, 1, 2], "s0-changelog": [0, 1, 2]},
                "owned_standby": {"s0-changelog": [3]},
                "offsets": {"s0-changelog": ends},
            },
            # b warmed up on task 1 (local state, no claim) and is the standby of task 2.
            "b": {
                "client_id": "b",
                "subscription": sorted(topics),
                "generation": 5,
                "owned_active": {"s0": [3], "s0-changelog": [3]},
                "owned_standby": {"s0-changelog": [2]},
                "offsets": {"s0-changelog": {"1": 500, "2": 500, "3": 500}},
            },
        },
    }
    result = plan(scenario)
    assert result["members"]["b"]["active"]["s0"] == [1, 3]
    assert result["members"]["a"]["active"]["s0"] == [0, 2]


def test_the_followup_moves_the_task_its_target_warmed_up_for() -> None:
    """Of two tasks the target is caught up on, the holder gives up the one the target says it
    warmed up for, not the one whose state the target kept from an earlier generation (no
    offset tells them apart: nobody wrote to the old task since). Found by the property below:
    after a member left, the warm member got another task and its warmup was wasted."""
    topics = {"s0": 4, "s0-changelog": 4}
    ends = {str(p): 500 for p in range(4)}
    scenario: Scenario = {
        "topics": topics,
        "changelog_topics": ["s0-changelog"],
        "acceptable_recovery_lag": 0,
        "end_offsets": {"s0-changelog": ends},
        "members": {
            # a holds three tasks; task 1 was held back on it for b last round.
            "a": {
                "client_id": "a",
                "subscription": sorted(topics),
                "generation": 5,
                "owned_active": {"s0": [0, 1, 2], "s0-changelog": [0, 1, 2]},
                "offsets": {"s0-changelog": {"0": 500, "1": 500, "2": 500}},
            },
            # b warmed up on task 1, and still has task 2's store from when it ran it.
            "b": {
                "client_id": "b",
                "subscription": sorted(topics),
                "generation": 5,
                "owned_active": {"s0": [3], "s0-changelog": [3]},
                "owned_warmup": {"s0-changelog": [1]},
                "offsets": {"s0-changelog": {"1": 500, "2": 500, "3": 500}},
            },
        },
    }
    result = plan(scenario)
    assert result["members"]["b"]["active"]["s0"] == [1, 3]
    assert result["members"]["a"]["active"]["s0"] == [0, 2]


def test_the_followup_gives_the_warm_member_the_extra_task_it_was_planned() -> None:
    """The hold-back round planned the group's extra task for the warm member: the follow-up
    keeps that plan, though the holder now holds more than its share because of the very tasks
    held back for it. Found by the property below (seed 20): a member left, its three tasks went
    to the one caught-up member, two held back there for the other, whose quota had the extra;
    the follow-up counted them as the holder's, let it keep the extra (rule 5), moved one task
    and wasted the other warmup."""
    topics = {"s0": 9, "s0-changelog": 9}
    ends = {str(p): 1_000 for p in range(9)}
    scenario: Scenario = {
        "topics": topics,
        "changelog_topics": ["s0-changelog"],
        "acceptable_recovery_lag": 0,
        "end_offsets": {"s0-changelog": ends},
        "members": {
            # a's planned share was 3, 4, 8 and, once warm, 6 and 7: five of nine.
            "a": {
                "client_id": "a",
                "subscription": sorted(topics),
                "generation": 7,
                "owned_active": {"s0": [3, 4, 8], "s0-changelog": [3, 4, 8]},
                "owned_warmup": {"s0-changelog": [6, 7]},
                "offsets": {"s0-changelog": {p: ends[p] for p in ("3", "4", "6", "7", "8")}},
            },
            # b was planned 0, 1, 2, 5 and held 6 and 7 back for a; it has every store.
            "b": {
                "client_id": "b",
                "subscription": sorted(topics),
                "generation": 7,
                "owned_active": {"s0": [0, 1, 2, 5, 6, 7], "s0-changelog": [0, 1, 2, 5, 6, 7]},
                "offsets": {"s0-changelog": ends},
            },
        },
    }
    result = plan(scenario)
    assert result["members"]["a"]["active"]["s0"] == [3, 4, 6, 7, 8]
    assert result["members"]["b"]["active"]["s0"] == [0, 1, 2, 5]
    assert result["followup_rebalance"] is False


def held_back_moves(scenario: Scenario, result: Result) -> list[tuple[int, str, str]]:
    """(partition, warm member, owner) for each task held back in ``result`` whose owner, in
    the follow-up round, keeps it and gives its warm member another of its tasks instead."""
    nxt = apply(result, scenario)
    followup = plan(nxt)
    found = []
    for topic in scenario["changelog_topics"]:
        source = topic.removesuffix("-changelog")
        before = {p: m for m, s in result["members"].items() for p in s["active"].get(source, [])}
        after = {p: m for m, s in followup["members"].items() for p in s["active"].get(source, [])}
        for member_id, share in result["members"].items():
            for p in share["warmup"].get(topic, []):
                owner = before.get(p)
                if after.get(p) != owner:
                    continue
                for q, was in before.items():
                    if was == owner and after.get(q) == member_id:
                        found.append((p, member_id, str(owner)))
    return found


#: Seed 20's failure: the last member to join warms up for two of the leaver's tasks.
SEED_20_LIFE = (
    {
        "topics": {"s0": 9, "s0-changelog": 9},
        "changelog_topics": ["s0-changelog"],
        "num_standbys": 0,
        "acceptable_recovery_lag": 0,
        "max_warmup_replicas": 2,
        "protocol": "eager",
        "end_offsets": {"s0-changelog": {str(p): 1_000 for p in range(9)}},
        "members": {
            f"m{i}": {"client_id": f"c{i}", "host": f"h{i}", "subscription": ["s0", "s0-changelog"]}
            for i in range(2)
        },
    },
    [("leave", 0), ("join", 0), ("join", 0), ("leave", 0)],
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lives())
@example(SEED_20_LIFE)
def test_a_warm_member_gets_the_task_it_warmed_up_for(life: tuple[Scenario, list[Any]]) -> None:
    scenario, events = life
    for serial, event in enumerate([None, *events]):
        if event is not None:
            scenario = happen(scenario, event, serial)
        for _ in range(bound(scenario)):
            result = plan(scenario)
            assert held_back_moves(scenario, result) == []
            scenario = apply(result, scenario)
            if not result["followup_rebalance"]:
                break
