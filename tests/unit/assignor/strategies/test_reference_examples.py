"""The reference documents' own examples, through `assignor.plan`, asserted where they are exact."""

from __future__ import annotations

import json
from typing import Any

import pytest

from assignor import plan
from tests.paths import SHARED_SCENARIOS

SCENARIOS = SHARED_SCENARIOS


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCENARIOS / name).read_text())
    return loaded


def _active(result: dict[str, Any]) -> dict[str, dict[str, list[int]]]:
    return {m: v["active"] for m, v in result["members"].items()}


def _pairs(by_topic: dict[str, list[int]]) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in by_topic.items() for p in ps}


def _counts(result: dict[str, Any]) -> dict[str, int]:
    return {m: len(_pairs(v["active"])) for m, v in result["members"].items()}


# --------------------------------------------------------------------------- KIP-49

KIP49 = "kip49-uneven-subscriptions.json"


def test_kip49_fair_reproduces_the_table() -> None:
    result = plan(_load(KIP49), strategy="fair")
    assert _active(result) == {
        "C1": {"T2": [0], "T3": [0]},
        "C2": {"T1": [0], "T3": [1]},
        "C3": {"T1": [1], "T5": [0]},
        "C4": {"T4": [0], "T5": [1]},
    }
    # The KIP's claims in words: two each; C2, C3 only from T1, T3, T5.
    assert set(_counts(result).values()) == {2}
    for member in ("C2", "C3"):
        assert {t for t, _ in _pairs(result["members"][member]["active"])} <= {"T1", "T3", "T5"}


def test_kip49_range_and_roundrobin_are_skewed_as_the_kip_shows() -> None:
    scenario = _load(KIP49)
    assert _active(plan(scenario, strategy="range")) == {
        "C1": {"T1": [0], "T2": [0], "T3": [0], "T4": [0], "T5": [0]},
        "C2": {"T1": [1], "T3": [1], "T5": [1]},
        "C3": {},
        "C4": {},
    }
    roundrobin = _active(plan(scenario, strategy="roundrobin"))
    assert roundrobin == {
        "C1": {"T1": [0], "T3": [0], "T5": [0]},
        "C2": {"T1": [1], "T3": [1], "T5": [1]},
        "C3": {},
        "C4": {"T2": [0], "T4": [0]},
    }


@pytest.mark.parametrize("strategy", ["sticky", "cooperative-sticky"])
def test_kip49_scenario_is_balanced_by_the_sticky_strategies(strategy: str) -> None:
    result = plan(_load(KIP49), strategy=strategy)
    assert set(_counts(result).values()) == {2}
    assert result["unassigned"] == {} and result["revoking"] == {}


# --------------------------------------------------------------------------- KIP-315

KIP315 = "kip315-join-member-leaves.json"


def test_kip315_d_leaves_nothing_of_a_b_c_moves_and_8_9_spread() -> None:
    scenario = _load(KIP315)
    result = plan(scenario, strategy="join-sticky")
    active = _active(result)
    for member_id, member in scenario["members"].items():
        for topic, partitions in member["owned_active"].items():
            assert set(partitions) <= set(active[member_id][topic]), member_id
    holders_8_9 = {m for m, by in active.items() for p in by.get("impressions", []) if p in (8, 9)}
    assert len(holders_8_9) == 2
    assert sorted(_counts(result).values()) == [6, 6, 8]
    for by_topic in active.values():
        assert by_topic["impressions"] == by_topic["clicks"]
    assert result["unassigned"] == {}
    assert result["stats"]["moved_active"] == 0


def test_kip315_range_moves_what_join_sticky_keeps() -> None:
    """The KIP's motivation: range reshuffles 3 and 6 when D leaves."""
    active = _active(plan(_load(KIP315), strategy="range"))
    assert active["A"]["impressions"] == [0, 1, 2, 3]
    assert active["B"]["impressions"] == [4, 5, 6]


def test_kip315_higher_epoch_wins_a_conflicting_claim() -> None:
    scenario = _load(KIP315)
    # A zombie from an old epoch still claims B's partitions 3, 4, 5.
    scenario["members"]["Z"] = {
        "subscription": ["impressions", "clicks"],
        "generation": 1,
        "owned_active": {"impressions": [3, 4, 5], "clicks": [3, 4, 5]},
    }
    active = _active(plan(scenario, strategy="join-sticky"))
    assert {3, 4, 5} <= set(active["B"]["impressions"])
    assert not {3, 4, 5} & set(active["Z"].get("impressions", []))


def test_kip315_partitions_beyond_the_smallest_topic_wait() -> None:
    scenario = _load(KIP315)
    # impressions is being expanded, clicks still has 10; a declared
    # co-partition group would reject that, KIP-315 copes with it.
    del scenario["copartitioned"]
    scenario["topics"]["impressions"] = 12
    result = plan(scenario, strategy="join-sticky")
    assert result["unassigned"] == {"impressions": [10, 11]}
    assert sum(_counts(result).values()) == 20


# --------------------------------------------------------------------------- KIP-54

KIP54 = "kip54-member-leaves.json"


@pytest.mark.parametrize("strategy", ["sticky", "cooperative-sticky"])
def test_kip54_example1_c1_leaves_every_surviving_assignment_is_kept(strategy: str) -> None:
    scenario = _load(KIP54)
    result = plan(scenario, strategy=strategy)
    active = _active(result)
    for member_id, member in scenario["members"].items():
        assert _pairs(member["owned_active"]) <= _pairs(active[member_id])
    assert sorted(_counts(result).values()) == [4, 4]
    assert result["unassigned"] == {} and result["revoking"] == {}
    assert result["followup_rebalance"] is False


def _kip54_example2(members: dict[str, Any]) -> dict[str, Any]:
    subscriptions = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    return {
        "topics": {"t0": 1, "t1": 2, "t2": 3},
        "members": {m: {"subscription": subscriptions[m], **extra} for m, extra in members.items()},
    }


def test_kip54_example2_uneven_subscriptions_then_c0_leaves_keeps_five() -> None:
    first = plan(_kip54_example2({"C0": {}, "C1": {}, "C2": {}}), strategy="sticky")
    assert _active(first) == {
        "C0": {"t0": [0]},
        "C1": {"t1": [0, 1]},
        "C2": {"t2": [0, 1, 2]},
    }
    survivors = {m: {"generation": 1, "owned_active": _active(first)[m]} for m in ("C1", "C2")}
    second = plan(_kip54_example2(survivors), strategy="sticky")
    assert _active(second) == {"C1": {"t0": [0], "t1": [0, 1]}, "C2": {"t2": [0, 1, 2]}}


# --------------------------------------------------------------------------- KIP-615


@pytest.mark.parametrize("strategy", ["sticky", "cooperative-sticky"])
def test_kip615_2100_members_2100_partitions_balanced_within_one(strategy: str) -> None:
    scenario = {
        "topics": {"t": 2100},
        "members": {f"c{i:04d}": {"subscription": ["t"]} for i in range(2100)},
    }
    result = plan(scenario, strategy=strategy)
    assert set(_counts(result).values()) == {1}
    # A member leaves: 2,099 members keep theirs, one takes the orphan.
    owned = _active(result)
    gone = "c0042"
    rebalanced = {
        "topics": {"t": 2100},
        "members": {
            m: {"subscription": ["t"], "generation": 1, "owned_active": owned[m]}
            for m in scenario["members"]
            if m != gone
        },
    }
    second = plan(rebalanced, strategy=strategy)
    counts = _counts(second)
    assert max(counts.values()) - min(counts.values()) <= 1
    assert second["stats"]["moved_active"] == 0
    assert second["revoking"] == {}


def test_kip615_constrained_path_gives_ceilings_to_at_most_p_mod_n_members() -> None:
    # 10 partitions, 4 members: two may hold 3, two hold 2. Everyone claims 3+.
    owned = {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7, 8, 9], "d": []}
    scenario = {
        "topics": {"t": 10},
        "members": {
            m: {"subscription": ["t"], "generation": 3, "owned_active": {"t": ps}}
            for m, ps in owned.items()
        },
    }
    result = plan(scenario, strategy="sticky")
    assert sorted(_counts(result).values()) == [2, 2, 3, 3]
    for member_id, partitions in owned.items():
        kept = set(partitions) & set(result["members"][member_id]["active"].get("t", []))
        assert len(kept) == min(
            len(partitions), len(_pairs(result["members"][member_id]["active"]))
        )


# --------------------------------------------------------------------------- all kip*.json


@pytest.mark.parametrize("name", sorted(p.name for p in SCENARIOS.glob("kip*.json")))
@pytest.mark.parametrize(
    "strategy", ["range", "roundrobin", "fair", "sticky", "cooperative-sticky", "join-sticky"]
)
def test_every_reference_scenario_gets_a_valid_result(name: str, strategy: str) -> None:
    scenario = _load(name)
    result = plan(scenario, strategy=strategy)
    seen: set[tuple[str, int]] = set()
    for member_id, member in result["members"].items():
        subscription = set(scenario["members"][member_id]["subscription"])
        for topic, partitions in member["active"].items():
            assert topic in subscription
            for partition in partitions:
                assert (topic, partition) not in seen
                seen.add((topic, partition))
    for topic, partitions in result["unassigned"].items():
        seen.update((topic, p) for p in partitions)
    for by_topic in result["revoking"].values():
        seen.update(_pairs(by_topic))
    everything = {(t, p) for t, n in scenario["topics"].items() for p in range(n)}
    assert seen == everything
    assert plan(scenario, strategy=strategy) == result


@pytest.mark.parametrize("strategy", ["sticky", "cooperative-sticky"])
def test_kip54_conflicting_claims_go_to_the_higher_generation(strategy: str) -> None:
    # Z missed a rebalance: it still reports 0 and 1 from generation 4, which
    # A has owned since generation 5.
    scenario = {
        "topics": {"t": 4},
        "members": {
            "A": {"subscription": ["t"], "generation": 5, "owned_active": {"t": [0, 1]}},
            "Z": {"subscription": ["t"], "generation": 4, "owned_active": {"t": [0, 1, 2, 3]}},
        },
    }
    result = plan(scenario, strategy=strategy)
    assert _active(result) == {"A": {"t": [0, 1]}, "Z": {"t": [2, 3]}}
    assert result["revoking"] == {} and result["followup_rebalance"] is False
