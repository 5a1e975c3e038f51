"""The leader's checks of what members say: offsets against the broker's end offsets,
claims against the group's generation. Pure: facts in, checked facts and a scenario out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from assignor import parse_scenario, plan
from assignor.metadata_codec import MemberMetadata
from streamapp.group_scenario import (
    GroupSettings,
    MemberFacts,
    build_scenario,
    check_facts,
    next_generation,
)

CHANGELOG = "app-counts-changelog"
TOPICS = ["words", CHANGELOG]
SETTINGS = GroupSettings(num_standbys=1, acceptable_recovery_lag=100, max_warmup_replicas=2)
EVERYTHING = {"words": [0, 1, 2, 3], CHANGELOG: [0, 1, 2, 3]}


def _member(
    client: str,
    *,
    generation: int = 3,
    owned: dict[str, list[int]] | None = None,
    offsets: dict[int, int] | None = None,
    ends: dict[int, int] | None = None,
) -> MemberFacts:
    return MemberFacts(
        TOPICS,
        MemberMetadata(
            client_id=client,
            url=f"http://{client}",
            generation=generation,
            owned_active=owned or {},
            offsets={CHANGELOG: offsets} if offsets else {},
            changelog_ends={CHANGELOG: ends} if ends else {},
        ),
    )


def _liar(*, generation: int = 10**6, offset: int = 10**9) -> MemberFacts:
    return _member(
        "rogue",
        generation=generation,
        owned=EVERYTHING,
        offsets={p: offset for p in range(4)},
        ends={p: offset for p in range(4)},
    )


def _honest() -> dict[str, MemberFacts]:
    # w1 and w2 hold two tasks each at generation 3, with state on disk for all four.
    return {
        "m-1": _member(
            "w1",
            owned={"words": [0, 1], CHANGELOG: [0, 1]},
            offsets={0: 500, 1: 500, 2: 480, 3: 490},
        ),
        "m-2": _member(
            "w2",
            owned={"words": [2, 3], CHANGELOG: [2, 3]},
            offsets={0: 490, 1: 495, 2: 500, 3: 500},
        ),
    }


BROKER_ENDS = {CHANGELOG: {0: 500, 1: 500, 2: 500, 3: 500}}
TOPIC_COUNTS = {"words": 4, CHANGELOG: 4}


def _plan(
    facts: Mapping[str, MemberFacts], ends: Mapping[str, Mapping[int, int]]
) -> dict[str, Any]:
    scenario = build_scenario(
        topics=TOPIC_COUNTS,
        changelog_topics=[CHANGELOG],
        members=facts,
        settings=SETTINGS,
        broker_ends=ends,
    )
    parse_scenario(scenario)
    return plan(scenario)


def test_an_offset_above_the_broker_end_is_cut_to_the_end_and_counted() -> None:
    # An honest generation, offsets beyond the end (an active that wrote since the ends were
    # read looks the same, until the ends are read again).
    members = {**_honest(), "m-x": _liar(generation=3)}
    checked = check_facts(members, broker_ends=BROKER_ENDS, group_generation=3)
    assert checked.offsets_beyond_end == {"m-x": {CHANGELOG: {p: 10**9 for p in range(4)}}}
    assert checked.offsets_beyond_end_count == 4
    assert checked.refused == frozenset() and checked.claims_above_generation == {}
    liar = checked.members["m-x"].metadata
    assert liar is not None and liar.offsets == {CHANGELOG: {0: 500, 1: 500, 2: 500, 3: 500}}
    # Honest members are passed through untouched.
    assert checked.members["m-1"] is members["m-1"]


def test_where_the_broker_gave_no_end_the_members_word_stands() -> None:
    # A brand-new leader has ends for partitions 0 and 1 only.
    members = {"m-x": _member("x", offsets={0: 900, 1: 10, 2: 900}, ends={3: 700})}
    partial = {CHANGELOG: {0: 500, 1: 500}}
    checked = check_facts(members, broker_ends=partial, group_generation=3)
    assert checked.offsets_beyond_end == {"m-x": {CHANGELOG: {0: 900}}}
    meta = checked.members["m-x"].metadata
    assert meta is not None and meta.offsets == {CHANGELOG: {0: 500, 1: 10, 2: 900}}
    scenario = build_scenario(
        topics=TOPIC_COUNTS,
        changelog_topics=[CHANGELOG],
        members=checked.members,
        settings=SETTINGS,
        broker_ends=partial,
    )
    # 0 and 1 from the broker; 2 and 3 from what members applied or saw, as before.
    assert scenario["end_offsets"] == {CHANGELOG: {"0": 500, "1": 500, "2": 900, "3": 700}}


def test_end_offsets_are_the_brokers_not_the_members() -> None:
    members = {**_honest(), "m-x": _liar(generation=3)}
    checked = check_facts(members, broker_ends=BROKER_ENDS, group_generation=3)
    scenario = build_scenario(
        topics=TOPIC_COUNTS,
        changelog_topics=[CHANGELOG],
        members=checked.members,
        settings=SETTINGS,
        broker_ends=BROKER_ENDS,
    )
    assert scenario["end_offsets"] == {CHANGELOG: {str(p): 500 for p in range(4)}}


def test_claims_above_the_group_generation_are_dropped_but_local_state_counts() -> None:
    members = {**_honest(), "m-x": _liar(offset=450)}
    checked = check_facts(members, broker_ends=BROKER_ENDS, group_generation=3)
    assert checked.claims_above_generation == {"m-x": 10**6}
    assert checked.refused == frozenset()
    liar = checked.members["m-x"].metadata
    assert liar is not None
    assert (liar.generation, liar.owned_active, liar.owned_standby) == (-1, {}, {})
    assert liar.offsets == {CHANGELOG: {p: 450 for p in range(4)}}  # what it has on disk
    # The next plan's generation follows the group's, not the claim.
    assert next_generation(checked.members.values()) == 4
    assert next_generation(members.values()) == 10**6 + 1  # what trusting it would have done


def test_a_claim_at_the_group_generation_counts_and_no_known_generation_checks_nothing() -> None:
    members = {**_honest(), "m-3": _member("w3", generation=7, owned={"words": [0]})}
    assert check_facts(members, broker_ends={}, group_generation=7).claims_above_generation == {}
    checked = check_facts(members, broker_ends={}, group_generation=None)
    assert checked.claims_above_generation == {}
    assert checked.members == members


def test_a_member_caught_in_both_lies_is_left_out() -> None:
    members = {**_honest(), "m-x": _liar()}
    checked = check_facts(members, broker_ends=BROKER_ENDS, group_generation=3)
    assert checked.refused == frozenset({"m-x"})
    assert set(checked.members) == {"m-1", "m-2"}
    assert checked.claims_above_generation == {"m-x": 10**6}
    assert checked.offsets_beyond_end_count == 4
    # Without end offsets to hold them against (a brand-new leader), only the claims go.
    fresh = check_facts(members, broker_ends={}, group_generation=3)
    assert fresh.refused == frozenset() and "m-x" in fresh.members


def test_offsets_found_false_count_as_no_state_until_they_are_within_the_end() -> None:
    # Partition 1 of w3's store claims more than its changelog holds (a damaged store, or a
    # topic created again); the leader's runtime found that report false earlier.
    owned = {"words": [1], CHANGELOG: [1]}
    damaged = _member("w3", owned=owned, offsets={0: 500, 1: 9000, 2: 120})
    false = {"m-3": {(CHANGELOG, 1)}}
    checked = check_facts(
        {"m-3": damaged}, broker_ends=BROKER_ENDS, group_generation=3, false_offsets=false
    )
    meta = checked.members["m-3"].metadata
    assert meta is not None and meta.offsets == {CHANGELOG: {0: 500, 2: 120}}
    assert (meta.owned_active, meta.generation) == ({}, 3)  # an owner with false state: no claim
    assert checked.offsets_not_counted == {"m-3": {CHANGELOG: [1]}}
    assert checked.offsets_beyond_end == {"m-3": {CHANGELOG: {1: 9000}}}
    # Rebuilt (the store was assigned): its report is within the end and counts again.
    healed = _member("w3", owned=owned, offsets={0: 500, 1: 500, 2: 120})
    checked = check_facts(
        {"m-3": healed}, broker_ends=BROKER_ENDS, group_generation=3, false_offsets=false
    )
    assert checked.members["m-3"] is healed and checked.offsets_not_counted == {}


def test_a_liar_no_longer_takes_every_task_nor_parks_the_others_on_warmups() -> None:
    """What main did: generation 10**6 won every claim and offsets of 10**9 made the end so far
    away that the real workers were behind on everything (warmups that could never catch up)."""
    members = {**_honest(), "m-x": _liar()}
    trusted = _plan(members, {})
    assert trusted["members"]["m-x"]["active"] == EVERYTHING  # the bug, as observed
    assert trusted["followup_rebalance"]

    checked = check_facts(members, broker_ends=BROKER_ENDS, group_generation=3)
    result = _plan(checked.members, BROKER_ENDS)
    assert result == _plan(_honest(), BROKER_ENDS)  # as if it were not there
    assert not result["followup_rebalance"]
    words = {m: share["active"]["words"] for m, share in result["members"].items()}
    assert words == {"m-1": [0, 1], "m-2": [2, 3]}


def test_a_liar_about_offsets_only_is_planned_with_no_state_once_found_out() -> None:
    members = {**_honest(), "m-x": _liar(generation=3)}
    # Before the runtime found it out: cut to the end, as caught up as anybody.
    checked = check_facts(members, broker_ends=BROKER_ENDS, group_generation=3)
    assert len(_plan(checked.members, BROKER_ENDS)["members"]["m-x"]["active"]["words"]) <= 2
    # After: no state at all, so no active stateful task, at most warmups.
    false = {"m-x": {(CHANGELOG, p) for p in range(4)}}
    checked = check_facts(members, broker_ends=BROKER_ENDS, group_generation=3, false_offsets=false)
    result = _plan(checked.members, BROKER_ENDS)
    assert result["members"]["m-x"]["active"].get("words", []) == []
    held = sorted(p for m in ("m-1", "m-2") for p in result["members"][m]["active"]["words"])
    assert held == [0, 1, 2, 3]


def test_what_a_member_kept_through_the_join_reaches_the_scenario_unchecked() -> None:
    # m-1 kept its partitions through a cooperative join, at a generation the leader never saw:
    # its claims count for nothing in the plan's stickiness, yet it is processing them.
    honest = _honest()
    meta = honest["m-1"].metadata
    assert meta is not None
    kept = MemberFacts(TOPICS, replace(meta, generation=9, kept_owned=True, protocol="cooperative"))
    members = {**honest, "m-1": kept}
    checked = check_facts(members, broker_ends=BROKER_ENDS, group_generation=3)
    assert checked.claims_above_generation == {"m-1": 9}
    stripped = checked.members["m-1"].metadata
    assert stripped is not None and stripped.owned_active == {}
    assert checked.kept_active == {"m-1": {"words": [0, 1], CHANGELOG: [0, 1]}}
    scenario = build_scenario(
        topics=TOPIC_COUNTS,
        changelog_topics=[CHANGELOG],
        members=checked.members,
        settings=SETTINGS,
        broker_ends=BROKER_ENDS,
        protocol="cooperative",
        kept_active=checked.kept_active,
    )
    assert scenario["members"]["m-1"]["kept_active"] == {"words": [0, 1], CHANGELOG: [0, 1]}
    assert "kept_active" not in scenario["members"]["m-2"]  # it did not say it kept anything


def test_a_members_warmups_reach_the_scenario_and_go_with_its_other_claims() -> None:
    warm = _member("w3", generation=3, offsets={1: 500}).metadata
    assert warm is not None
    members = {**_honest(), "m-3": MemberFacts(TOPICS, replace(warm, warmup={CHANGELOG: [1]}))}
    checked = check_facts(members, broker_ends=BROKER_ENDS, group_generation=3)
    scenario = build_scenario(
        topics=TOPIC_COUNTS,
        changelog_topics=[CHANGELOG],
        members=checked.members,
        settings=SETTINGS,
        broker_ends=BROKER_ENDS,
    )
    assert scenario["members"]["m-3"]["owned_warmup"] == {CHANGELOG: [1]}
    assert "owned_warmup" not in scenario["members"]["m-1"]
    assert parse_scenario(scenario).members["m-3"].owned_warmup == {CHANGELOG: (1,)}
    # Claimed at a generation the group never had: dropped with its other claims.
    members["m-3"] = MemberFacts(TOPICS, replace(warm, generation=9, warmup={CHANGELOG: [1]}))
    checked = check_facts(members, broker_ends=BROKER_ENDS, group_generation=3)
    assert checked.claims_above_generation == {"m-3": 9}
    stray = checked.members["m-3"].metadata
    assert stray is not None
    assert (stray.owned_active, stray.warmup) == ({}, {})
