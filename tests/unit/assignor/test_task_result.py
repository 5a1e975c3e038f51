"""`build_task_result` answers exactly what the generic `build_result` answers.

The stateful strategy builds its eager-protocol result straight from its
per-group task arrays (`assignor.result.build_task_result`), for speed; every strategy
else goes through `assignor.result.build_result`. Both must give the same
object for the same decision: members, lists, unassigned and every stat.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from assignor import build_result, group_partitions, parse_scenario, plan
from assignor.result import build_task_result
from assignor.runs import runs_by_member
from assignor.stateful import decide, placements
from tests.unit.assignor.test_stateful_properties import SETTINGS, Scenario, applied, scenarios


def _both(raw: Scenario) -> tuple[object, object]:
    scenario = parse_scenario(raw)
    grouping = group_partitions(scenario)
    decision, held_back = decide(scenario, grouping)
    stats = {"held_back_for_warmup": held_back}
    fast = build_task_result(
        scenario, grouping, decision, followup_rebalance=held_back > 0, stats=stats
    )
    active, standby, warmup = placements(grouping, decision)
    generic = build_result(
        "stateful",
        scenario,
        grouping,
        active=active,
        standby=standby,
        warmup=warmup,
        followup_rebalance=held_back > 0,
        stats=stats,
    )
    # JSON both ways: the same object, down to list vs tuple.
    return json.loads(json.dumps(fast)), json.loads(json.dumps(generic))


@SETTINGS
@given(scenarios(), st.booleans())
def test_the_fast_result_equals_the_generic_one(raw: Scenario, again: bool) -> None:
    if again:  # a second round: claims, standbys, offsets from the first
        raw = applied(plan(raw), raw)
    fast, generic = _both(raw)
    assert fast == generic


def test_the_fast_result_equals_the_generic_one_with_unassigned_and_stale_claims() -> None:
    raw: Scenario = {
        "topics": {"a": 3, "a-changelog": 3, "b": 3, "orphan": 2},
        "changelog_topics": ["a-changelog"],
        "copartitioned": [["a", "b"]],
        "num_standbys": 2,
        "members": {
            "m1": {"subscription": ["a", "a-changelog"], "owned_active": {"orphan": [1], "a": [0]}},
            "m2": {"subscription": ["b"], "owned_active": {"gone": [0], "b": [2]}},
        },
    }
    fast, generic = _both(raw)
    assert fast == generic
    # a, its changelog (same subscribers) and b (declared) are one group that
    # nobody subscribes to whole; orphan has no subscriber at all.
    assert set(fast["unassigned"]) == {"a", "a-changelog", "b", "orphan"}  # type: ignore[index]


def test_runs_by_member_gives_each_member_its_partitions_ascending() -> None:
    assert runs_by_member([2, -1, 0, 2, 0, 1]) == {0: [2, 4], 1: [5], 2: [0, 3]}
    assert runs_by_member([2, -1, 0, -1], keep_unowned=True) == {-1: [1, 3], 0: [2], 2: [0]}
    assert runs_by_member([]) == {}
