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
