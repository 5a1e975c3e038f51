"""The leader's choice of rebalance protocol (KIP-429), and what members are told to run next.

The group runs cooperative only once every member speaks it; a member that kept its partitions
through the join makes this rebalance cooperative whatever the others speak, so nothing it keeps
goes straight to another member. Real faust App and assignor, no broker (the integration test
is tests/integration/test_cooperative_rebalance.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import faust
import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from assignor.metadata_codec import (
    MemberMetadata,
    decode_assignment,
    decode_metadata,
    encode_metadata,
)
from streamapp.group_scenario import MemberFacts, rebalance_protocols
from streamapp.partition_assignor import StreamappPartitionAssignor
from streamapp.settings import RebalanceProtocol, StreamappSettings

TOPIC = "words"


class Cluster:
    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(4)) if topic == TOPIC else None


@pytest.fixture
def assignor(tmp_path: Path) -> StreamappPartitionAssignor:
    app = faust.App(
        "sa-coop",
        store="rocksdb://",
        datadir=str(tmp_path),
        PartitionAssignor=StreamappPartitionAssignor,
        web_port=6124,
    )
    app.streamapp_settings = StreamappSettings(  # type: ignore[attr-defined]
        client_id="w1", num_standby_replicas=0, rebalance_protocol=RebalanceProtocol.COOPERATIVE
    )
    assert isinstance(app.assignor, StreamappPartitionAssignor)
    return app.assignor


def _member(
    client: str, protocol: str, owned: list[int], *, kept: bool = False, generation: int = 1
) -> bytes:
    meta = MemberMetadata(
        client_id=client,
        url=f"http://{client}:1",
        host=client,
        generation=generation,
        owned_active={TOPIC: owned} if owned else {},
        protocol=protocol,
        kept_owned=kept,
    )
    return encode_metadata(meta)


def _plan(
    assignor: StreamappPartitionAssignor, members: dict[str, bytes]
) -> dict[str, tuple[list[int], str, bool]]:
    out = assignor.assign(
        Cluster(),  # type: ignore[arg-type]
        {m: ConsumerProtocolMemberMetadata(0, [TOPIC], data) for m, data in members.items()},
    )
    shares = {m: decode_assignment(a.user_data) for m, a in out.items()}
    return {
        m: (s.active.get(TOPIC, []), s.group_protocol, s.followup_rebalance)
        for m, s in shares.items()
    }


def test_all_cooperative_withholds_a_moving_partition_for_one_round(
    assignor: StreamappPartitionAssignor,
) -> None:
    # a holds everything and kept it through the join; b is new: what moves to b is taken from
    # a now and given to b in the next round only.
    plan = _plan(
        assignor,
        {
            "a": _member("a", "cooperative", [0, 1, 2, 3], kept=True),
            "b": _member("b", "cooperative", []),
        },
    )
    kept, protocol, followup = plan["a"]
    assert protocol == "cooperative" and followup
    assert plan["b"][0] == []
    assert 0 < len(kept) < 4  # a keeps its share, gives up the rest, nobody gets that yet
    # The next round: a rejoined owning only what it kept; b now gets the rest.
    plan = _plan(
        assignor,
        {"a": _member("a", "cooperative", kept, kept=True), "b": _member("b", "cooperative", [])},
    )
    assert plan["a"][0] == kept
    assert sorted(plan["b"][0]) == sorted(set(range(4)) - set(kept))
    assert not plan["a"][2]


def test_a_kept_partition_is_withheld_even_when_its_claim_is_not_trusted(
    assignor: StreamappPartitionAssignor,
) -> None:
    # The leader has seen generation 2 at most (its own first plan); a claims generation 9, so
    # its claims count for nothing in the plan's stickiness. But a kept its partitions through
    # the join and is processing them: none may go to b before a has given it up.
    first = _plan(
        assignor, {"w1": _member("w1", "cooperative", []), "c": _member("c", "eager", [])}
    )
    assert first  # the leader now knows generation 2
    plan = _plan(
        assignor,
        {
            "a": _member("a", "cooperative", [0, 1, 2, 3], kept=True, generation=9),
            "b": _member("b", "cooperative", []),
        },
    )
    assert plan["b"][0] == []  # what moves to b is only taken from a this round
    assert plan["a"][2]  # ... and handed to b in the follow-up


def test_a_mixed_group_runs_eager(assignor: StreamappPartitionAssignor) -> None:
    plan = _plan(
        assignor, {"a": _member("a", "cooperative", [0, 1, 2, 3]), "b": _member("b", "eager", [])}
    )
    assert {p for share, _, _ in plan.values() for p in share} == {0, 1, 2, 3}  # nothing held
    assert {protocol for _, protocol, _ in plan.values()} == {"eager"}


def test_an_eager_member_joining_a_cooperative_group_still_gets_nothing_a_member_kept(
    assignor: StreamappPartitionAssignor,
) -> None:
    plan = _plan(
        assignor,
        {"a": _member("a", "cooperative", [0, 1, 2, 3], kept=True), "b": _member("b", "eager", [])},
    )
    assert plan["b"][0] == []  # withheld: a still holds what moves
    assert plan["a"][1] == "eager"  # ... and the next rebalance is eager for everyone


def test_an_old_member_without_the_field_is_eager() -> None:
    old = MemberMetadata(client_id="old", url="http://old:1")
    new = replace(old, client_id="new", protocol="cooperative")
    assert rebalance_protocols([MemberFacts([TOPIC], old), MemberFacts([TOPIC], new)]) == (
        "eager",
        "eager",
    )
    assert rebalance_protocols([MemberFacts([TOPIC], new)]) == ("cooperative", "cooperative")
    # An unreadable member gets no work: it does not hold the group back.
    assert rebalance_protocols([MemberFacts([TOPIC], new), MemberFacts([TOPIC], None)]) == (
        "cooperative",
        "cooperative",
    )


def test_a_member_keeps_its_partitions_only_once_the_group_runs_cooperative(
    assignor: StreamappPartitionAssignor,
) -> None:
    assert not assignor.keeps_owned_through_join()  # no plan yet
    plan = {"w1": assignor.metadata({TOPIC}).user_data, "b": _member("b", "cooperative", [])}
    assert decode_metadata(plan["w1"]).protocol == "cooperative"
    out = assignor.assign(
        Cluster(),  # type: ignore[arg-type]
        {m: ConsumerProtocolMemberMetadata(0, [TOPIC], d) for m, d in plan.items()},
    )
    assignor.on_assignment(out["w1"])
    assert assignor.keeps_owned_through_join()
    assignor.on_join_prepared(kept_owned=True)
    assert decode_metadata(assignor.metadata({TOPIC}).user_data).kept_owned
    # Under the eager setting a worker never keeps, whatever the group's protocol.
    assignor.app.streamapp_settings = replace(  # type: ignore[attr-defined]
        assignor.settings, rebalance_protocol=RebalanceProtocol.EAGER
    )
    assert not assignor.keeps_owned_through_join()


def test_under_exactly_once_a_worker_speaks_cooperative_when_asked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = faust.App(
        "sa-coop-eos",
        store="rocksdb://",
        datadir=str(tmp_path),
        PartitionAssignor=StreamappPartitionAssignor,
        processing_guarantee="exactly_once",
        web_port=6124,
    )
    app.in_worker = True  # as under `streamapp worker`: Faust's transactions are on
    app.streamapp_settings = StreamappSettings(  # type: ignore[attr-defined]
        client_id="w1", rebalance_protocol=RebalanceProtocol.COOPERATIVE
    )
    assignor = app.assignor
    assert isinstance(assignor, StreamappPartitionAssignor)
    # Incremental rebalances end and open each partition's transaction
    # (streamapp.runtime.rebalance): no fallback to eager, and nothing to warn about.
    assert decode_metadata(assignor.metadata({TOPIC}).user_data).protocol == "cooperative"
    assert not [r for r in caplog.records if "exactly_once" in r.getMessage()]


class NinePartitions:
    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(9)) if topic == TOPIC else None


def test_the_follow_up_round_hands_a_withheld_partition_to_the_member_it_was_planned_for(
    assignor: StreamappPartitionAssignor,
) -> None:
    """A returning member claims its old tasks at an old generation; the others kept theirs.
    The first round moves tasks to it, withheld while their owners revoke them; the follow-up
    is planned afresh, and without the first round's intent it placed them elsewhere."""
    first = assignor.assign(
        NinePartitions(),  # type: ignore[arg-type]
        {
            m: ConsumerProtocolMemberMetadata(0, [TOPIC], data)
            for m, data in {
                "a1": _member("w1", "cooperative", [2, 3], generation=8),
                "b": _member("w2", "cooperative", [0, 1, 2, 3], kept=True, generation=11),
                "c": _member("w3", "cooperative", [4, 5, 6, 7, 8], kept=True, generation=11),
            }.items()
        },
    )
    shares = {m: decode_assignment(a.user_data) for m, a in first.items()}
    assert shares["a1"].active == {}
    planned = shares["a1"].incoming[TOPIC]
    assert {2, 3} <= set(planned)
    # w1 (this worker) takes its share; its next join claims what was planned for it, and
    # says it owns nothing: a claim on an incoming partition is not one it processes.
    assignor.on_assignment(first["a1"])
    own = decode_metadata(assignor.metadata({TOPIC}).user_data)
    assert own.owned_active == {}
    assert own.incoming == {TOPIC: planned}
    own = replace(own, kept_owned=True)
    others = {
        m: encode_metadata(
            MemberMetadata(
                client_id=client,
                url=f"http://{client}:1",
                host=client,
                generation=shares[m].generation,
                owned_active=shares[m].active,
                protocol="cooperative",
                kept_owned=True,
                incoming=shares[m].incoming,
            )
        )
        for m, client in (("b", "w2"), ("c", "w3"))
    }
    second = assignor.assign(
        NinePartitions(),  # type: ignore[arg-type]
        {
            m: ConsumerProtocolMemberMetadata(0, [TOPIC], data)
            for m, data in {"a1": encode_metadata(own), **others}.items()
        },
    )
    after = {m: decode_assignment(a.user_data) for m, a in second.items()}
    for m, share in shares.items():
        wanted = sorted({*share.active.get(TOPIC, []), *share.incoming.get(TOPIC, [])})
        assert after[m].active.get(TOPIC, []) == wanted
        assert after[m].incoming == {}
    assert not any(s.followup_rebalance for s in after.values())
