"""The ``faust`` baseline runs stock Faust, and ``stateful`` is never worse."""

from __future__ import annotations

from typing import Any

from assignor import plan


def _group(partitions: int, members: int) -> dict[str, Any]:
    topics = {"orders": partitions, "orders-changelog": partitions}
    return {
        "topics": topics,
        "changelog_topics": ["orders-changelog"],
        "num_standbys": 1,
        "members": {
            f"m{i:02d}": {"host": f"h{i}", "subscription": sorted(topics)} for i in range(members)
        },
    }


def _applied(scenario: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    members = {}
    for member_id, fields in scenario["members"].items():
        share = result["members"][member_id]
        members[member_id] = {
            **fields,
            "generation": 1,
            "owned_active": share["active"],
            "owned_standby": share["standby"],
        }
    return {**scenario, "members": members}


def _after_leave(scenario: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    left = _applied(scenario, result)
    del left["members"]["m04"]
    return left


def test_after_a_member_leaves_stateful_stays_within_one_where_faust_may_not() -> None:
    scenario = _group(100, 10)
    spreads = {}
    for strategy in ("faust", "stateful"):
        fresh = plan(scenario, strategy=strategy)
        left = plan(_after_leave(scenario, fresh), strategy=strategy)
        assert left["strategy"] == strategy
        assert (
            sum(len(share["active"].get("orders", [])) for share in left["members"].values()) == 100
        )
        spreads[strategy] = left["stats"]["max_active_spread"]
        assert left["stats"]["standbys_missing"] == 0
    assert spreads["stateful"] <= 1
    assert spreads["stateful"] <= spreads["faust"]


def test_faust_keeps_previous_owners_like_stock_faust() -> None:
    scenario = _group(12, 3)
    fresh = plan(scenario, strategy="faust")
    again = plan(_applied(scenario, fresh), strategy="faust")
    assert again["stats"]["moved_active"] == 0
    assert again["members"] == fresh["members"]
