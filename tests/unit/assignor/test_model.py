"""Scenario validation: every kind of bad input names its field; stale facts are counted."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from assignor import ScenarioError, parse_scenario


def _base() -> dict[str, Any]:
    return {
        "topics": {"clicks": 4, "clicks-changelog": 4},
        "changelog_topics": ["clicks-changelog"],
        "members": {
            "m1": {
                "client_id": "w1",
                "subscription": ["clicks", "clicks-changelog"],
                "generation": 2,
                "owned_active": {"clicks": [0, 1]},
                "offsets": {"clicks-changelog": {"0": 10}},
            }
        },
    }


def _with(path: list[str | int], value: Any) -> dict[str, Any]:
    scenario = _base()
    target: Any = scenario
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return scenario


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        ([1, 2], "scenario: must be a JSON object"),
        ({"members": {}}, "topics: required field is missing"),
        ({"topics": {}}, "members: required field is missing"),
        (
            _with(["topics", "clicks"], 0),
            "topics.clicks: partition count must be at least 1, got 0",
        ),
        (_with(["topics", "clicks"], "4"), "topics.clicks: must be an integer"),
        (_with(["surprise"], 1), "surprise: unknown key"),
        (_with(["members", "m1", "colour"], "red"), "members.m1.colour: unknown key"),
        (_with(["members", "m1", "capacity"], 0), "members.m1.capacity: value must be at least 1"),
        (_with(["members", "m1", "capacity"], True), "members.m1.capacity: must be an integer"),
        (_with(["num_standbys"], -1), "num_standbys: value must be at least 0, got -1"),
        (
            _with(["acceptable_recovery_lag"], -5),
            "acceptable_recovery_lag: value must be at least 0",
        ),
        (_with(["protocol"], "lazy"), "protocol: must be one of eager, cooperative"),
        (
            _with(["changelog_topics"], ["nope"]),
            "changelog_topics[0]: topic 'nope' is not in topics",
        ),
        (_with(["copartitioned"], [["clicks", "nope"]]), "copartitioned[0][1]: topic 'nope'"),
        (
            _with(["members", "m1", "owned_active"], {"clicks": [-1]}),
            "members.m1.owned_active.clicks[0]: partition must be at least 0",
        ),
        (
            _with(["members", "m1", "owned_warmup"], {"clicks-changelog": [1, -2]}),
            "members.m1.owned_warmup.clicks-changelog[1]: partition must be at least 0",
        ),
        (
            _with(["members", "m1", "offsets"], {"clicks-changelog": {"0": -3}}),
            "members.m1.offsets.clicks-changelog.0: offset must be at least 0",
        ),
        (
            _with(["members", "m1", "offsets"], {"clicks-changelog": {"-2": 3}}),
            "members.m1.offsets.clicks-changelog.-2: partition must be at least 0",
        ),
        (
            _with(["members", "m1", "subscription"], "clicks"),
            "members.m1.subscription: must be a list",
        ),
        (
            {"topics": {"a": 1}, "members": {"m": {"client_id": "x"}}},
            "members.m.subscription: required field is missing",
        ),
    ],
)
def test_bad_input_names_the_field(scenario: Any, message: str) -> None:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(scenario)
    assert str(raised.value).startswith(message), str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_transitively_merged_declared_groups_with_different_counts_name_every_topic() -> None:
    scenario = {
        "topics": {"a": 3, "b": 3, "c": 5},
        "copartitioned": [["a", "b"], ["b", "c"]],
        "members": {},
    }
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(scenario)
    text = str(raised.value)
    assert "a has 3" in text and "b has 3" in text and "c has 5" in text


def test_stale_facts_are_dropped_and_counted() -> None:
    scenario = _base()
    member = scenario["members"]["m1"]
    member["subscription"].append("deleted-topic")  # 1
    member["owned_active"] = {"clicks": [0, 9], "deleted-topic": [0, 1]}  # 3
    member["offsets"] = {"clicks-changelog": {"0": 5, "7": 5}}  # 1
    member["owned_warmup"] = {"clicks-changelog": [3, 8]}  # 1
    parsed = parse_scenario(scenario)
    assert parsed.stale_claims == 6
    m1 = parsed.members["m1"]
    assert m1.subscription == ("clicks", "clicks-changelog")
    assert m1.owned_active == {"clicks": (0,)}
    assert m1.offsets == {"clicks-changelog": {0: 5}}
    assert m1.owned_warmup == {"clicks-changelog": (3,)}


def test_higher_generation_wins_a_conflicting_claim_and_ties_void_it() -> None:
    scenario = _base()
    second = copy.deepcopy(scenario["members"]["m1"])
    second["client_id"] = "w2"
    second["generation"] = 1
    second["owned_active"] = {"clicks": [1, 2]}
    third = copy.deepcopy(second)
    third["client_id"] = "w3"
    third["owned_active"] = {"clicks": [2]}
    scenario["members"]["m2"] = second
    scenario["members"]["m3"] = third
    parsed = parse_scenario(scenario)
    assert parsed.members["m1"].owned_active == {"clicks": (0, 1)}
    # m2 lost partition 1 to m1's higher generation; m2 and m3 tie on partition 2.
    assert parsed.members["m2"].owned_active == {}
    assert parsed.members["m3"].owned_active == {}
    assert parsed.conflicting_claims == 3


def test_a_member_that_loses_a_claim_keeps_its_warmups() -> None:
    scenario = _base()
    loser = copy.deepcopy(scenario["members"]["m1"])
    loser["client_id"] = "w2"
    loser["generation"] = 1
    loser["owned_active"] = {"clicks": [1, 2]}
    loser["owned_warmup"] = {"clicks-changelog": [3]}
    scenario["members"]["m2"] = loser
    parsed = parse_scenario(scenario)
    assert parsed.members["m2"].owned_active == {"clicks": (2,)}
    assert parsed.members["m2"].owned_warmup == {"clicks-changelog": (3,)}


def test_end_offsets_default_to_the_highest_reported_offset() -> None:
    scenario = _base()
    other = copy.deepcopy(scenario["members"]["m1"])
    other["offsets"] = {"clicks-changelog": {"0": 40, "2": 7}}
    other["owned_active"] = {}
    scenario["members"]["m2"] = other
    scenario["end_offsets"] = {"clicks-changelog": {"2": 100}}
    parsed = parse_scenario(scenario)
    assert parsed.end_offsets == {"clicks-changelog": {0: 40, 2: 100}}


def test_defaults() -> None:
    parsed = parse_scenario({"topics": {"a": 1}, "members": {"m": {"subscription": ["a"]}}})
    member = parsed.members["m"]
    assert (member.client_id, member.capacity, member.generation) == ("m", 1, -1)
    assert (parsed.num_standbys, parsed.acceptable_recovery_lag) == (0, 10000)
    assert (parsed.max_warmup_replicas, parsed.protocol) == (2, "eager")


def test_a_declared_group_of_one_topic_is_accepted() -> None:
    """It used to raise KeyError (a traceback, not a ScenarioError): the check's own
    union-find never saw a topic with nothing to merge with."""
    parsed = parse_scenario({"topics": {"a": 2}, "copartitioned": [["a"]], "members": {}})
    assert parsed.copartitioned == (("a",),)
