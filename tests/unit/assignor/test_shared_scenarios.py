"""Every shared scenario does what its name says, asserted exactly.

The scenarios are the project's reference cases (KIP examples, ad-click rebalances, a bad
co-partitioning), kept in the repository under ``tests/data/scenarios/shared/``.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from assignor import ScenarioError, plan
from tests.paths import REPO_ROOT

SCENARIOS = REPO_ROOT / "tests" / "data" / "scenarios" / "shared"
IMPRESSIONS = "adclick-impressions-changelog"
PENDING = "adclick-pending-clicks-changelog"
ADCLICK_TOPICS = (IMPRESSIONS, PENDING, "clicks", "impressions")

Scenario = dict[str, Any]
Result = dict[str, Any]


def load(name: str) -> Scenario:
    data: Scenario = json.loads((SCENARIOS / f"{name}.json").read_text())
    return data


def tasks(share: dict[str, list[int]], topics: tuple[str, ...] = ADCLICK_TOPICS) -> list[int]:
    """Partitions of a co-partitioned share, checking every topic agrees."""
    present = [sorted(share.get(t, [])) for t in topics]
    assert all(p == present[0] for p in present), f"not co-partitioned: {share}"
    return present[0]


def changelog_tasks(share: dict[str, list[int]]) -> list[int]:
    return tasks(share, (IMPRESSIONS, PENDING))


def next_round(result: Result, scenario: Scenario) -> Scenario:
    """Apply a result; every replica (standby, warmup) catches up meanwhile."""
    nxt = copy.deepcopy(scenario)
    ends = scenario["end_offsets"]
    for member_id, member in nxt["members"].items():
        share = result["members"][member_id]
        member["generation"] = member.get("generation", 0) + 1
        member["owned_active"] = share["active"]
        member["owned_standby"] = share["standby"]
        offsets = member.setdefault("offsets", {})
        for placement in (share["active"], share["standby"], share["warmup"]):
            for topic in (IMPRESSIONS, PENDING):
                for p in placement.get(topic, []):
                    offsets.setdefault(topic, {})[str(p)] = ends[topic][str(p)]
    return nxt


def check_adclick_rolling_restart() -> None:
    """worker-2 comes back under a new member id and gets its own tasks back."""
    result = plan(load("adclick-rolling-restart"))
    members = result["members"]
    assert tasks(members["m-worker-1"]["active"]) == [0, 1]
    assert tasks(members["m-worker-2-restarted"]["active"]) == [2, 3]
    assert tasks(members["m-worker-3"]["active"]) == [4, 5]
    # Standbys stay where they were; the restarted worker's come from its disk.
    assert changelog_tasks(members["m-worker-1"]["standby"]) == [2, 4]
    assert changelog_tasks(members["m-worker-3"]["standby"]) == [1, 3]
    assert changelog_tasks(members["m-worker-2-restarted"]["standby"]) == [0, 5]
    assert all(share["warmup"] == {} for share in members.values())
    assert result["followup_rebalance"] is False
    assert result["stats"]["moved_active"] == 0
    assert result["stats"]["standbys_missing"] == 0


def check_adclick_worker_crash() -> None:
    """worker-2 is gone: its tasks go to their standbys, nothing else moves."""
    result = plan(load("adclick-worker-crash"))
    members = result["members"]
    assert tasks(members["m-worker-1"]["active"]) == [0, 1, 2]  # 2: its standby
    assert tasks(members["m-worker-3"]["active"]) == [3, 4, 5]  # 3: its standby
    assert changelog_tasks(members["m-worker-1"]["standby"]) == [3, 4, 5]
    assert changelog_tasks(members["m-worker-3"]["standby"]) == [0, 1, 2]
    assert result["followup_rebalance"] is False
    assert result["stats"]["moved_active"] == 0
    assert result["stats"]["warmups"] == 0


def check_adclick_scale_out() -> None:
    """worker-4 joins empty: it warms up first, and takes a task once caught up."""
    scenario = load("adclick-scale-out")
    first = plan(scenario)
    members = first["members"]
    # Nothing moves yet: 500,000 records to replay is far past the acceptable lag.
    before = {m: tasks(s.get("owned_active", {})) for m, s in scenario["members"].items()}
    assert {m: tasks(share["active"]) for m, share in members.items()} == before
    assert first["followup_rebalance"] is True
    assert first["stats"]["moved_active"] == 0
    warming = changelog_tasks(members["m-worker-4"]["warmup"])
    assert warming == [5]  # worker-3 gives up its highest task once it can
    assert 5 not in changelog_tasks(members["m-worker-4"]["standby"])
    assert first["stats"]["standbys_missing"] == 0
    counts = [len(changelog_tasks(share["standby"])) for share in members.values()]
    assert max(counts) - min(counts) <= 1

    second = plan(next_round(first, scenario))
    members = second["members"]
    assert tasks(members["m-worker-4"]["active"]) == [5]
    assert tasks(members["m-worker-3"]["active"]) == [4]
    assert tasks(members["m-worker-1"]["active"]) == [0, 1]
    assert tasks(members["m-worker-2"]["active"]) == [2, 3]
    assert second["followup_rebalance"] is False
    assert second["stats"]["moved_active"] == 1
    assert second["stats"]["max_active_spread"] == 1

    third = plan(next_round(second, next_round(first, scenario)))
    assert third["members"] == second["members"]  # and there it stays


def check_bad_copartition_mismatch() -> None:
    """Declared co-partitioned topics with different counts: one clear error."""
    with pytest.raises(ScenarioError) as raised:
        plan(load("bad-copartition-mismatch"))
    message = str(raised.value)
    assert message.startswith("copartitioned[0]: ")
    assert "clicks has 8" in message and "impressions has 12" in message
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "assignor",
            "plan",
            str(SCENARIOS / "bad-copartition-mismatch.json"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    assert cli.returncode == 2
    assert cli.stdout == ""
    assert cli.stderr.count("\n") == 1 and "clicks has 8" in cli.stderr


def check_kip315_join_member_leaves() -> None:
    """A join's third member left: the partitions it held go to A, B and C,
    joined partitions stay together, and nobody else's move."""
    result = plan(load("kip315-join-member-leaves"))
    members = result["members"]
    join = ("clicks", "impressions")
    held = {m: tasks(share["active"], join) for m, share in members.items()}
    assert set(held["A"]) >= {0, 1, 2}
    assert set(held["B"]) >= {3, 4, 5}
    assert set(held["C"]) >= {6, 7}
    assert sorted(p for ps in held.values() for p in ps) == list(range(10))
    assert sorted(len(ps) for ps in held.values()) == [3, 3, 4]
    assert held["C"] in ([6, 7, 8], [6, 7, 9])  # C held fewer than its share
    assert result["stats"]["moved_active"] == 0
    assert result["unassigned"] == {}


def check_kip49_uneven_subscriptions() -> None:
    """KIP-49's example: T2/T4 only for C1 and C4; nobody ends up two ahead."""
    result = plan(load("kip49-uneven-subscriptions"))
    members = result["members"]
    odd = {m: tasks(s["active"], ("T1", "T3", "T5")) for m, s in members.items()}
    even = {m: tasks(s["active"], ("T2", "T4")) for m, s in members.items()}
    assert sorted(p for ps in odd.values() for p in ps) == [0, 1]
    assert [m for m, ps in even.items() if ps] in (["C1"], ["C4"])
    totals = {m: len(odd[m]) + len(even[m]) for m in members}
    assert sorted(totals.values()) == [0, 1, 1, 1]
    assert result["followup_rebalance"] is False


def check_kip54_member_leaves() -> None:
    """KIP-54's example after C1 left; Faust's rule co-partitions t0..t3 (same
    count, same subscribers), so each member keeps the task it claimed most of."""
    result = plan(load("kip54-member-leaves"))
    topics = ("t0", "t1", "t2", "t3")
    assert result["groups"] == [{"topics": list(topics), "partitions": 2, "stateful": False}]
    members = result["members"]
    assert tasks(members["C0"]["active"], topics) == [0]  # C0 claimed t0-0, t3-0
    assert tasks(members["C2"]["active"], topics) == [1]  # the other, where C2 had t2-1
    assert result["stats"]["max_active_spread"] == 0


EXPECTATIONS: dict[str, Callable[[], None]] = {
    "adclick-rolling-restart": check_adclick_rolling_restart,
    "adclick-worker-crash": check_adclick_worker_crash,
    "adclick-scale-out": check_adclick_scale_out,
    "bad-copartition-mismatch": check_bad_copartition_mismatch,
    "kip315-join-member-leaves": check_kip315_join_member_leaves,
    "kip49-uneven-subscriptions": check_kip49_uneven_subscriptions,
    "kip54-member-leaves": check_kip54_member_leaves,
}


def test_every_shared_scenario_has_an_expectation() -> None:
    assert SCENARIOS.is_dir(), f"shared scenarios expected at {SCENARIOS}"
    assert {p.stem for p in SCENARIOS.glob("*.json")} == set(EXPECTATIONS)


@pytest.mark.parametrize("name", sorted(EXPECTATIONS))
def test_scenario_behaves_as_named(name: str) -> None:
    EXPECTATIONS[name]()


@pytest.mark.parametrize("name", sorted(n for n in EXPECTATIONS if not n.startswith("bad-")))
def test_faust_baseline_answers_every_scenario_copartitioned(name: str) -> None:
    scenario = load(name)
    result = plan(scenario, strategy="faust")
    assert result["strategy"] == "faust"
    assert set(result["members"]) == set(scenario["members"])
    owner: dict[tuple[str, int], str] = {}
    for member_id, share in result["members"].items():
        for topic, partitions in share["active"].items():
            for p in partitions:
                assert (topic, p) not in owner
                owner[(topic, p)] = member_id
    for group in result["groups"]:
        for p in range(group["partitions"]):
            assert len({owner[(t, p)] for t in group["topics"]}) == 1
    assert set(owner) == {(t, p) for t, n in scenario["topics"].items() for p in range(n)}
