"""Member facts to a plan.md scenario and a plan result back to per-member shares."""

from __future__ import annotations

from assignor import parse_scenario, plan
from assignor.metadata_codec import MemberMetadata
from streamapp.group_scenario import (
    GroupSettings,
    MemberFacts,
    build_scenario,
    kafka_partitions,
    next_generation,
    shares_from_result,
)

SETTINGS = GroupSettings(num_standbys=1, acceptable_recovery_lag=100, max_warmup_replicas=2)
TOPICS = ["words", "app-counts-changelog"]


def _facts() -> dict[str, MemberFacts]:
    return {
        "m-1": MemberFacts(
            TOPICS,
            MemberMetadata(
                client_id="w1",
                url="http://w1",
                host="h1",
                rack="r1",
                capacity=2,
                generation=4,
                owned_active={"words": [0], "app-counts-changelog": [0]},
                offsets={"app-counts-changelog": {0: 500, 1: 20}, "gone-changelog": {0: 1}},
            ),
        ),
        "m-2": MemberFacts(TOPICS, None),
    }


def test_scenario_is_valid_and_carries_every_fact() -> None:
    scenario = build_scenario(
        topics={"words": 2, "app-counts-changelog": 2},
        changelog_topics=["app-counts-changelog", "not-subscribed-changelog"],
        members=_facts(),
        settings=SETTINGS,
    )
    parse_scenario(scenario)
    assert scenario["changelog_topics"] == ["app-counts-changelog"]
    m1 = scenario["members"]["m-1"]
    assert m1["client_id"] == "w1" and m1["capacity"] == 2 and m1["rack"] == "r1"
    assert m1["offsets"]["app-counts-changelog"] == {"0": 500, "1": 20}
    assert scenario["members"]["m-2"] == {"client_id": "m-2", "subscription": sorted(TOPICS)}
    assert next_generation(_facts().values()) == 5


def test_shares_cover_the_result_and_the_whole_group_map() -> None:
    scenario = build_scenario(
        topics={"words": 2, "app-counts-changelog": 2},
        changelog_topics=["app-counts-changelog"],
        members=_facts(),
        settings=SETTINGS,
    )
    result = plan(scenario, strategy="sticky")
    shares = shares_from_result(result, generation=5, urls={"m-1": "http://w1", "m-2": "x://m-2"})
    assert set(shares) == {"m-1", "m-2"}
    everyone = shares["m-1"].actives_by_url
    assert everyone == shares["m-2"].actives_by_url
    assert sorted(p for tps in everyone.values() for p in tps.get("words", [])) == [0, 1]
    for member_id, share in shares.items():
        assert share.generation == 5
        assert dict(kafka_partitions(share)) == {
            t: sorted(ps) for t, ps in result["members"][member_id]["active"].items() if ps
        }


def test_end_offsets_are_the_furthest_any_member_saw_or_applied() -> None:
    # w2 replicated partition 0 and saw its end at 800 before w1 (the active) crashed; w3
    # applied partition 1 up to 60 while w2 last saw 40 there.
    def member(client: str, *, offsets: dict[int, int], ends: dict[int, int]) -> MemberFacts:
        return MemberFacts(
            TOPICS,
            MemberMetadata(
                client_id=client,
                url=f"http://{client}",
                offsets={"app-counts-changelog": offsets},
                changelog_ends={"app-counts-changelog": ends, "other-changelog": {0: 9}},
            ),
        )

    scenario = build_scenario(
        topics={"words": 2, "app-counts-changelog": 2},
        changelog_topics=["app-counts-changelog"],
        members={
            "m-2": member("w2", offsets={0: 790, 1: 40}, ends={0: 800, 1: 40}),
            "m-3": member("w3", offsets={1: 60}, ends={}),
            "m-4": MemberFacts(TOPICS, None),
        },
        settings=SETTINGS,
    )
    assert scenario["end_offsets"] == {"app-counts-changelog": {"0": 800, "1": 60}}
    assert parse_scenario(scenario).end_offsets["app-counts-changelog"] == {0: 800, 1: 60}
