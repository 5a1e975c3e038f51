"""Cooperative plans over two rounds: the follow-up gives a withheld partition to the member the
first round moved it to, once that member claims its ``incoming`` partitions (as workers do)."""

from __future__ import annotations

from typing import Any

from assignor import plan

TOPIC = "words"


def _member(client: str, owned: list[int], generation: int, *, kept: bool) -> dict[str, Any]:
    member: dict[str, Any] = {
        "client_id": client,
        "host": client,
        "subscription": [TOPIC],
        "generation": generation,
        "owned_active": {TOPIC: owned} if owned else {},
    }
    if kept and owned:
        member["kept_active"] = {TOPIC: owned}
    return member


def _scenario(members: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "topics": {TOPIC: 9},
        "changelog_topics": [],
        "num_standbys": 0,
        "protocol": "cooperative",
        "members": members,
    }


def test_the_second_round_places_withheld_partitions_where_the_first_moved_them() -> None:
    # w1 comes back claiming its old tasks at an old generation; w2 and w3 kept theirs.
    first = plan(
        _scenario(
            {
                "a": _member("w1", [2, 3], 8, kept=False),
                "b": _member("w2", [0, 1, 2, 3], 11, kept=True),
                "c": _member("w3", [4, 5, 6, 7, 8], 11, kept=True),
            }
        )
    )
    incoming = first["incoming"]
    assert first["members"]["a"]["active"] == {}
    assert {2, 3} <= set(incoming["a"][TOPIC])
    # Round two: each member claims what it kept plus what was planned for it (its
    # ``incoming``, as `streamapp.group_scenario` turns a worker's metadata into a claim).
    members = {}
    for m, client in (("a", "w1"), ("b", "w2"), ("c", "w3")):
        kept = first["members"][m]["active"].get(TOPIC, [])
        member = _member(client, kept, 12, kept=True)
        member["owned_active"] = {TOPIC: sorted({*kept, *incoming.get(m, {}).get(TOPIC, [])})}
        members[m] = member
    second = plan(_scenario(members))
    for m, member in members.items():
        assert second["members"][m]["active"] == member["owned_active"]
    assert second["revoking"] == {}
    assert "incoming" not in second
    assert second["followup_rebalance"] is False


CHANGELOG = "words-changelog"


def _stateful(client: str, owned: list[int], standby: list[int]) -> dict[str, Any]:
    return {
        "client_id": client,
        "host": client,
        "subscription": [TOPIC, CHANGELOG],
        "generation": 11,
        "owned_active": {TOPIC: owned, CHANGELOG: owned} if owned else {},
        "kept_active": {TOPIC: owned, CHANGELOG: owned} if owned else {},
        "owned_standby": {CHANGELOG: standby} if standby else {},
        # Every copy caught up: the newcomer's warmup of partitions 4 and 5 included.
        "offsets": {CHANGELOG: {str(p): 100 for p in {*owned, *standby}}},
    }


def test_the_member_a_partition_is_withheld_from_keeps_a_standby_of_its_changelog() -> None:
    # d joined and warmed up tasks 4 and 5; this round moves one of them to it.
    first = plan(
        {
            "topics": {TOPIC: 6, CHANGELOG: 6},
            "changelog_topics": [CHANGELOG],
            "num_standbys": 0,
            "protocol": "cooperative",
            "end_offsets": {CHANGELOG: {str(p): 100 for p in range(6)}},
            "members": {
                "a": _stateful("w1", [0, 1], []),
                "b": _stateful("w2", [2, 3], []),
                "c": _stateful("w3", [4, 5], []),
                "d": _stateful("w4", [], [4, 5]),
            },
        }
    )
    withheld = first["incoming"]["d"][CHANGELOG]
    assert withheld and set(withheld) <= {4, 5}
    assert first["revoking"]["c"][CHANGELOG] == withheld
    d = first["members"]["d"]
    assert not set(withheld) & set(d["active"].get(CHANGELOG, []))
    # Its warmed-up store goes on replaying through the round nobody processes the task in
    # (not given up and reopened in the follow-up); the old member holds no copy meanwhile.
    assert set(withheld) <= set(d["standby"][CHANGELOG])
    assert not set(withheld) & set(first["members"]["c"]["standby"].get(CHANGELOG, []))
