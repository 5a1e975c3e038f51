"""The PartitionGrouper: declared groups, Faust's rule, eligibility, stateful groups."""

from __future__ import annotations

from typing import Any

from assignor import group_partitions, parse_scenario


def _groups(scenario: dict[str, Any]) -> list[tuple[tuple[str, ...], tuple[str, ...], bool]]:
    grouping = group_partitions(parse_scenario(scenario))
    return [(g.topics, g.eligible, g.stateful) for g in grouping.groups]


def test_changelog_joins_its_sources_by_faust_rule_and_declared_groups_merge() -> None:
    scenario = {
        "topics": {"a": 4, "b": 4, "a-changelog": 4, "c": 4, "other": 2},
        "changelog_topics": ["a-changelog"],
        "copartitioned": [["a", "b"], ["b", "c"]],
        "members": {
            "m1": {"subscription": ["a", "b", "c", "a-changelog", "other"]},
            "m2": {"subscription": ["a", "b", "a-changelog"]},
        },
    }
    # a, b and a-changelog share count and subscribers; c is declared with b.
    # Only m1 subscribes to c, so only m1 is eligible for the merged group.
    assert _groups(scenario) == [
        (("a", "a-changelog", "b", "c"), ("m1",), True),
        (("other",), ("m1",), False),
    ]


def test_same_count_different_subscribers_stay_apart_and_unsubscribed_topics_are_ungrouped() -> (
    None
):
    scenario = {
        "topics": {"x": 3, "y": 3, "nobody": 3},
        "members": {"m1": {"subscription": ["x", "y"]}, "m2": {"subscription": ["x"]}},
    }
    grouping = group_partitions(parse_scenario(scenario))
    assert [g.topics for g in grouping.groups] == [("x",), ("y",)]
    assert [g.eligible for g in grouping.groups] == [("m1", "m2"), ("m1",)]
    assert grouping.unassigned_topics == ("nobody",)
    assert grouping.task_count() == 6


def test_grouping_ignores_mapping_order() -> None:
    topics = {"a": 2, "b": 2, "c": 2}
    members = {"m1": {"subscription": ["c", "a"]}, "m2": {"subscription": ["b"]}}
    forward = {"topics": topics, "members": members, "copartitioned": [["a", "b"]]}
    backward = {
        "copartitioned": [["b", "a"]],
        "members": dict(reversed(members.items())),
        "topics": dict(reversed(topics.items())),
    }
    assert group_partitions(parse_scenario(forward)) == group_partitions(parse_scenario(backward))
