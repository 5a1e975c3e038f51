"""`streamapp group`'s pure part: decoding DescribeGroups members, the view, the what-if."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from assignor.metadata_codec import (
    MemberAssignment,
    MemberMetadata,
    encode_assignment,
    encode_metadata,
)
from assignor.natural import natural_key
from streamapp.group_scenario import GroupSettings
from streamapp.ops.group_view import (
    Change,
    DescribedGroup,
    GroupViewError,
    RawMember,
    current_facts,
    format_group,
    format_what_if,
    group_json,
    parse_change,
    read_group,
    what_if,
    what_if_json,
)

APP = "shop"
SOURCE = "shop-orders"
CHANGELOG = "shop-totals-changelog"
TOPICS = {SOURCE: 4, CHANGELOG: 4}
ENDS = {CHANGELOG: {0: 100, 1: 100, 2: 100, 3: 100}}
SETTINGS = GroupSettings(num_standbys=1, acceptable_recovery_lag=10, max_warmup_replicas=2)


def _member(
    client: str,
    active: Sequence[int],
    standby: Sequence[int],
    *,
    offsets: Mapping[int, int] | None = None,
    warmup: Sequence[int] = (),
    generation: int = 5,
) -> RawMember:
    metadata = MemberMetadata(
        client_id=client,
        url=f"http://{client}:6066",
        host=f"host-{client}",
        rack="rack-a",
        capacity=1,
        generation=generation - 1,
        offsets={CHANGELOG: dict(offsets or {})},
    )
    share = MemberAssignment(
        generation=generation,
        active={SOURCE: list(active), CHANGELOG: list(active)},
        standby={CHANGELOG: list(standby)} if standby else {},
        warmup={CHANGELOG: list(warmup)} if warmup else {},
    )
    return RawMember(
        member_id=f"streamapp-{client}-uuid",
        kafka_client_id="faust-0.15.3",
        client_host=f"/10.0.0.{len(client)}",
        metadata=ConsumerProtocolMemberMetadata(
            0, sorted(TOPICS), encode_metadata(metadata)
        ).encode(),
        assignment=ConsumerProtocolMemberAssignment(0, [], encode_assignment(share)).encode(),
    )


def _group(*members: RawMember, protocol: str = "streamapp") -> DescribedGroup:
    return DescribedGroup(APP, "Stable", "consumer", protocol, list(members))


def _three() -> DescribedGroup:
    # worker-10 is listed first, as the broker may: the view sorts it last.
    return _group(
        _member("worker-10", [2, 3], [1], offsets={1: 90}),
        _member("worker-2", [0], [2, 3], offsets={2: 100, 3: 40}),
        _member("worker-1", [1], [0], offsets={0: 100}),
    )


def test_natural_order_puts_2_before_10() -> None:
    names = ["member-10", "member-2", "member-1", "m", "member-2a"]
    assert sorted(names, key=natural_key) == ["m", "member-1", "member-2", "member-2a", "member-10"]


def test_json_has_the_contract_shape_with_lag_per_replica() -> None:
    out = group_json(read_group(_three(), ENDS))
    assert {k: out[k] for k in ("group", "state", "generation", "protocol")} == {
        "group": APP,
        "state": "Stable",
        "generation": 5,
        "protocol": "streamapp",
    }
    assert [m["client_id"] for m in out["members"]] == ["worker-1", "worker-2", "worker-10"]
    w2 = out["members"][1]
    assert w2 == {
        "member_id": "streamapp-worker-2-uuid",
        "client_id": "worker-2",
        "host": "host-worker-2",
        "rack": "rack-a",
        "capacity": 1,
        "active": {CHANGELOG: [0], SOURCE: [0]},
        "standby": {CHANGELOG: [2, 3]},
        "warmup": {},
        # End 100 minus what it reported: 100 for partition 2, 40 for partition 3.
        "lag": {CHANGELOG: {"2": 0, "3": 60}},
    }
    # A replica with no reported offset has the whole changelog to replay.
    assert out["members"][2]["lag"] == {CHANGELOG: {"1": 10}}


def test_table_lists_partitions_per_member_and_explains_lag_up_front() -> None:
    text = format_group(read_group(_three(), ENDS))
    lines = text.splitlines()
    assert lines[0] == "group shop: Stable, protocol streamapp, plan generation 5, 3 member(s)"
    assert lines[1].startswith("lag: changelog records")
    assert text.index("worker-1 ") < text.index("worker-2 ") < text.index("worker-10 ")
    assert "  standby  shop-totals-changelog: 2 (lag 0), 3 (lag 60)" in lines
    assert "  warmup   -" in lines
    assert "rack rack-a" in text


@pytest.mark.parametrize(
    ("group", "message"),
    [
        (DescribedGroup(APP, "Dead", "", "", []), "does not exist"),
        (_group(protocol="faust"), "has no members now"),
        (DescribedGroup(APP, "Stable", "consumer", "faust", [_member("w", [0], [])]), "'faust'"),
        (DescribedGroup(APP, "Stable", "connect", "x", [_member("w", [0], [])]), "not a consumer"),
    ],
)
def test_groups_streamapp_does_not_run_are_refused(group: DescribedGroup, message: str) -> None:
    with pytest.raises(GroupViewError, match=message):
        read_group(group)


def test_an_unreadable_member_is_shown_with_why() -> None:
    rogue = RawMember("rogue-1", "rogue", "/10.0.0.9", b"\x00\x00garbage", b"")
    out = group_json(read_group(_group(_member("w1", [0, 1, 2, 3], []), rogue), ENDS))
    shown = next(m for m in out["members"] if m["member_id"] == "rogue-1")
    assert shown["client_id"] == "rogue"
    assert shown["active"] == {} and "unreadable" in shown


@pytest.mark.parametrize(
    ("text", "change"),
    [
        ("leave worker-2", Change("leave", client_id="worker-2")),
        ("  add 3 ", Change("add", count=3)),
    ],
)
def test_parse_change(text: str, change: Change) -> None:
    assert parse_change(text) == change


@pytest.mark.parametrize("text", ["remove worker-2", "add 0", "add many", "leave"])
def test_bad_changes_are_one_line_errors(text: str) -> None:
    with pytest.raises(GroupViewError, match="--what-if"):
        parse_change(text)


def test_leave_moves_only_the_leavers_tasks_to_their_standbys() -> None:
    view = read_group(_three(), ENDS)
    found = what_if(view, parse_change("leave worker-10"), topics=TOPICS, settings=SETTINGS)
    actives = [m for m in found.moves if m.kind == "active"]
    # worker-10 held tasks 2 and 3; worker-2 holds their standbys, caught up for 2 (lag 0)
    # and 60 behind for 3 (beyond the acceptable 10, so 3 may go to a warmup instead).
    assert {(m.topic, m.partition) for m in actives} <= {
        (t, p) for t in (SOURCE, CHANGELOG) for p in (2, 3)
    }
    assert all(m.from_client == "worker-10" for m in actives)
    moved_2 = next(m for m in actives if m.topic == CHANGELOG and m.partition == 2)
    assert (moved_2.to_client, moved_2.replay) == ("worker-2", 0)
    assert found.replayed_before_resume == sum(
        m.replay or 0 for m in actives if m.topic == CHANGELOG
    )
    out = what_if_json(found)
    assert out["change"] == "leave worker-10"
    assert out["settings"]["acceptable_recovery_lag"] == 10
    # Nothing stays with the member that left.
    assert all(m["to"] != "worker-10" for m in out["moves"])


def test_unchanged_group_moves_nothing_when_nobody_leaves_or_joins() -> None:
    # Adding a member to a group of one: the newcomer gets a standby, no active leaves
    # before it has caught up (it has no local state).
    view = read_group(_group(_member("w1", [0, 1, 2, 3], [], offsets={})), ENDS)
    found = what_if(view, parse_change("add 1"), topics=TOPICS, settings=SETTINGS)
    assert {m.to_client for m in found.moves} <= {"new-1"}
    assert all(m.kind != "active" or m.replay in (None, 100) for m in found.moves)
    text = format_what_if(found)
    assert text.splitlines()[0].startswith("what if: add 1 (planned with num_standby_replicas 1")
    assert "records replayed before processing resumes" in text


def test_leave_of_an_unknown_client_names_the_members() -> None:
    view = read_group(_three(), ENDS)
    with pytest.raises(GroupViewError, match="members: worker-1, worker-2, worker-10"):
        what_if(view, parse_change("leave worker-9"), topics=TOPICS, settings=SETTINGS)


def test_table_leaves_out_fausts_leader_topic_and_json_keeps_it() -> None:
    leader = f"{APP}-__assignor-__leader"
    raw = _member("worker-1", [0, 1, 2, 3], [])
    share = MemberAssignment(
        generation=5, active={SOURCE: [0, 1, 2, 3], CHANGELOG: [0, 1, 2, 3], leader: [0]}
    )
    raw = RawMember(
        raw.member_id,
        raw.kafka_client_id,
        raw.client_host,
        raw.metadata,
        ConsumerProtocolMemberAssignment(0, [], encode_assignment(share)).encode(),
    )
    view = read_group(_group(raw), ENDS)
    text = format_group(view)
    assert leader not in text
    assert f"  active   {SOURCE}: 0, 1, 2, 3" in text.splitlines()
    assert group_json(view)["members"][0]["active"][leader] == [0]


def test_the_what_if_plans_with_the_warmups_of_the_current_assignment() -> None:
    # As the leader would see them at the next join: what each member warms up for now.
    view = read_group(
        _group(
            _member("w1", [0, 1, 2], [3], offsets={0: 100, 1: 100, 2: 100, 3: 100}),
            # w2 warms up on task 1 and still has task 2's store from when it ran it.
            _member("w2", [3], [], offsets={1: 100, 2: 100, 3: 100}, warmup=[1]),
            _member("w3", [], [], offsets={}),
        ),
        ENDS,
    )
    warm = current_facts(view)["streamapp-w2-uuid"].metadata
    assert warm is not None and warm.warmup == {CHANGELOG: [1]}
    found = what_if(view, parse_change("leave w3"), topics=TOPICS, settings=SETTINGS)
    moved = {(m.topic, m.partition, m.to_client) for m in found.moves if m.kind == "active"}
    assert moved == {(SOURCE, 1, "w2"), (CHANGELOG, 1, "w2")}
