"""The leader trusts only what it can check, through the Faust adapter: a real faust
App, real rocksdict stores and the real replica runtime, with a stand-in for the cluster metadata
(as in test_partition_assignor.py) and for the consumer the runtime reads end offsets through."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import faust
import pytest
import rocksdict
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from faust.types import TP

from assignor.metadata_codec import (
    MemberMetadata,
    decode_assignment,
    encode_metadata,
)
from standby.runtime import OFFSET_REPORT_GRACE_S, ReplicaRuntime
from streamapp.partition_assignor import StreamappPartitionAssignor
from streamapp.settings import StreamappSettings
from tables.inventory import OFFSET_KEY

CHANGELOG = "sa-check-counts-changelog"
TOPICS = ["words", CHANGELOG]
CLUSTER_COUNTS = {"words": 4, CHANGELOG: 4}
END = 100


class Cluster:
    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self.counts.get(topic)
        return set(range(n)) if n else None


class Consumer:
    """What the runtime asks of Faust's consumer: partition counts and end offsets."""

    started = True

    def __init__(self, ends: dict[TP, int]) -> None:
        self.ends = ends
        self.asked: list[set[TP]] = []

    def topic_partitions(self, topic: str) -> int | None:
        return CLUSTER_COUNTS.get(topic)

    async def highwaters(self, *tps: TP) -> Mapping[TP, int]:
        self.asked.append(set(tps))
        return {tp: self.ends[tp] for tp in tps if tp in self.ends}


class Leader:
    """The leader's assignor and runtime, with a clock the test moves."""

    def __init__(self, app: faust.App) -> None:
        self.app = app
        self.now = 1000.0
        self.runtime = ReplicaRuntime(
            app, acceptable_recovery_lag=10, probing_interval_s=30, clock=lambda: self.now
        )
        self.rebalances_asked = 0
        self.runtime.request_rebalance = self._ask  # type: ignore[method-assign]
        # The group's Kafka generation, as aiokafka's coordinator has it during assign().
        self.runtime.member = lambda: ("m-self", 5)  # type: ignore[method-assign]
        app.streamapp_runtime = self.runtime  # type: ignore[attr-defined]
        self.consumer = Consumer({TP(CHANGELOG, p): END for p in range(4)})
        app.consumer = self.consumer  # type: ignore[assignment]
        # As the runtime's last tick read them from the broker.
        self.runtime.changelog_ends = dict(self.consumer.ends)
        assert isinstance(app.assignor, StreamappPartitionAssignor)
        self.assignor: StreamappPartitionAssignor = app.assignor

    def _ask(self) -> None:
        self.rebalances_asked += 1

    def assign(
        self, others: dict[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        members = {"m-self": self.assignor.metadata(set(TOPICS)), **others}
        out: dict[str, ConsumerProtocolMemberAssignment] = self.assignor.assign(
            Cluster(CLUSTER_COUNTS), members
        )
        self.assignor.on_assignment(out["m-self"])  # the leader is a member too
        return out


@pytest.fixture
def leader(tmp_path: Path) -> Leader:
    app = faust.App(
        "sa-check",
        store="rocksdb://",
        datadir=str(tmp_path),
        PartitionAssignor=StreamappPartitionAssignor,
        web_port=6125,
    )
    app.Table("counts", default=int, partitions=4)
    app.streamapp_settings = StreamappSettings(  # type: ignore[attr-defined]
        client_id="w1", acceptable_recovery_lag=10
    )
    # The leader has every partition's state on disk, caught up.
    for p in range(4):
        path = Path(app.conf.tabledir) / f"counts-{p}.db"
        db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
        db.put(OFFSET_KEY, str(END - 1).encode())
        db.close()
    return Leader(app)


def _member(
    client: str, *, generation: int = -1, offsets: dict[int, int] | None = None, **kw: Any
) -> ConsumerProtocolMemberMetadata:
    meta = MemberMetadata(
        client_id=client,
        url=f"http://{client}:1",
        generation=generation,
        offsets={CHANGELOG: offsets} if offsets else {},
        **kw,
    )
    return ConsumerProtocolMemberMetadata(4, TOPICS, encode_metadata(meta))


def _liar(generation: int = 10**6) -> ConsumerProtocolMemberMetadata:
    everything = {"words": [0, 1, 2, 3], CHANGELOG: [0, 1, 2, 3]}
    return _member(
        "rogue",
        generation=generation,
        owned_active=everything,
        offsets={p: 10**9 for p in range(4)},
        changelog_ends={CHANGELOG: {p: 10**9 for p in range(4)}},
    )


def _warnings(caplog: pytest.LogCaptureFixture, *words: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and all(w in r.getMessage() for w in words)
    ]


def _words(out: Mapping[str, ConsumerProtocolMemberAssignment], member: str) -> list[int]:
    return decode_assignment(out[member].user_data).active.get("words", [])


def test_unreadable_metadata_gets_no_work_and_one_warning(
    leader: Leader, caplog: pytest.LogCaptureFixture
) -> None:
    # On main such a member was planned as a fresh one, given work it never processed.
    garbage = ConsumerProtocolMemberMetadata(4, ["words"], b"SA\x01not zlib at all")
    others = {"m-good": _member("w2"), "m-garbage": garbage}
    with caplog.at_level(logging.INFO):
        first = leader.assign(others)
        second = leader.assign(others)
    for out in (first, second):
        assert out["m-garbage"].assignment == []
        assert decode_assignment(out["m-garbage"].user_data).active == {}
        held = sorted(_words(out, "m-self") + _words(out, "m-good"))
        assert held == [0, 1, 2, 3]
        # Left out of the plan: its subscription (words only) did not split the co-partitioned
        # source and changelog.
        for member in ("m-self", "m-good"):
            share = decode_assignment(out[member].user_data).active
            assert share.get("words", []) == share.get(CHANGELOG, [])
    warned = _warnings(caplog, "m-garbage")
    assert len(warned) == 1, warned
    assert "cannot read (member metadata is corrupt" in warned[0]
    assert "given no partitions" in warned[0]
    planned = [r.getMessage() for r in caplog.records if "planned generation" in r.getMessage()]
    assert len(planned) == 2 and all("'members_refused': 1" in line for line in planned)
    assert all("for 2 member(s)" in line for line in planned)


def test_a_member_lying_about_generation_and_offsets_gets_nothing(
    leader: Leader, caplog: pytest.LogCaptureFixture
) -> None:
    others = {"m-good": _member("w2", offsets={p: END for p in range(4)}), "m-liar": _liar()}
    with caplog.at_level(logging.INFO):
        first = leader.assign(others)
        second = leader.assign(others)
    for out in (first, second):
        assert out["m-liar"].assignment == []
        assert sorted(_words(out, "m-self") + _words(out, "m-good")) == [0, 1, 2, 3]
        shares = [decode_assignment(out[m].user_data) for m in ("m-self", "m-good")]
        assert all(not s.warmup and not s.followup_rebalance for s in shares)
    warned = _warnings(caplog, "m-liar")
    assert len(warned) == 1, warned  # once per member, not per rebalance
    assert "(client rogue) claims partitions at generation 1000000" in warned[0]
    assert "above any this group has had (5)" in warned[0]  # the group's Kafka generation
    assert f"{CHANGELOG}[0] at 1000000000, end {END}" in warned[0] and "and 1 more" in warned[0]
    assert "given no partitions" in warned[0]
    planned = [r.getMessage() for r in caplog.records if "planned generation" in r.getMessage()]
    assert planned[0].startswith("streamapp: planned generation 1 ")  # not 10**6 + 1
    assert "'offsets_beyond_end': 4" in planned[0] and "'members_refused': 1" in planned[0]
    assert "for 2 member(s)" in planned[0]


def test_claims_above_the_group_generation_do_not_count(
    leader: Leader, caplog: pytest.LogCaptureFixture
) -> None:
    everything = {"words": [0, 1, 2, 3], CHANGELOG: [0, 1, 2, 3]}
    # State on disk as caught up as anybody's (nothing to catch it on), a claim to everything.
    claimer = _member(
        "w3", generation=10**6, owned_active=everything, offsets={p: END for p in range(4)}
    )
    good = _member("w2", offsets={p: END for p in range(4)})
    with caplog.at_level(logging.INFO):
        out = leader.assign({"m-good": good, "m-claimer": claimer})
        leader.assign({"m-good": good, "m-claimer": claimer})
    warned = _warnings(caplog, "m-claimer")
    assert len(warned) == 1, warned
    assert "(client w3) claims partitions at generation 1000000, above any" in warned[0]
    assert "its claims are ignored" in warned[0]
    # Not every task, as when its claim won: a balanced share of three members at most.
    assert 0 < len(_words(out, "m-claimer")) <= 2
    assert decode_assignment(out["m-claimer"].user_data).generation == 1
    planned = [r.getMessage() for r in caplog.records if "planned generation" in r.getMessage()]
    assert "'claims_above_generation': 1" in planned[0] and "'members_refused': 0" in planned[0]


def test_a_member_lying_about_offsets_is_found_out_and_its_state_stops_counting(
    leader: Leader, caplog: pytest.LogCaptureFixture
) -> None:
    # A generation of this group, so it could be an active that wrote since the last read.
    others = {"m-good": _member("w2", offsets={p: END for p in range(4)}), "m-liar": _liar(1)}
    with caplog.at_level(logging.INFO):
        out = leader.assign(others)
    # Its claims at a generation of this group are plausible, its offsets as caught up as
    # anybody's (cut to the end): it keeps no more than a balanced share.
    assert len(_words(out, "m-liar")) <= 2
    planned = [r.getMessage() for r in caplog.records if "planned generation" in r.getMessage()]
    assert "'offsets_beyond_end': 4" in planned[-1]
    assert not _warnings(caplog)

    # The leader's next reads of the broker: within the grace period, nothing is said.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        leader.now += 1
        _tick(leader)
        assert leader.runtime.false_offsets == {}
        assert not _warnings(caplog)
        leader.now += OFFSET_REPORT_GRACE_S
        _tick(leader)
        _tick(leader)
    warned = _warnings(caplog, "m-liar", "broker does not have")
    assert len(warned) == 1, warned
    assert "client rogue" in warned[0]
    assert f"{CHANGELOG}[0] at 1000000000, end {END}" in warned[0]
    assert "and 1 more" in warned[0] and "does not count" in warned[0]
    assert leader.runtime.false_offsets == {"m-liar": {TP(CHANGELOG, p) for p in range(4)}}
    assert leader.rebalances_asked == 1  # so that the plan knows better at once
    # Every changelog partition was read, not only this worker's replicas.
    assert leader.consumer.asked[-1] >= {TP(CHANGELOG, p) for p in range(4)}

    caplog.clear()
    with caplog.at_level(logging.INFO):
        out = leader.assign(others)
    # No state counts for it: no stateful task is active there.
    assert _words(out, "m-liar") == []
    assert sorted(_words(out, "m-self") + _words(out, "m-good")) == [0, 1, 2, 3]
    assert not _warnings(caplog)  # each warning once per member
    planned = [r.getMessage() for r in caplog.records if "planned generation" in r.getMessage()]
    assert "'offsets_not_counted': 4" in planned[-1]

    # A member that left is forgotten.
    leader.assign({"m-good": others["m-good"]})
    assert leader.runtime.false_offsets == {}


def test_an_offset_written_since_the_last_read_is_not_a_lie(
    leader: Leader, caplog: pytest.LogCaptureFixture
) -> None:
    # w2 is active for partition 2 and wrote 30 records since the leader last read the ends.
    offsets = {0: END, 1: END, 2: END + 30, 3: END}
    others = {"m-good": _member("w2", generation=1, offsets=offsets)}
    with caplog.at_level(logging.INFO):
        out = leader.assign(others)
        planned = [r.getMessage() for r in caplog.records if "planned generation" in r.getMessage()]
        assert "'offsets_beyond_end': 1" in planned[-1]  # cut to the end the leader knew
        leader.consumer.ends[TP(CHANGELOG, 2)] = END + 45
        leader.now += OFFSET_REPORT_GRACE_S + 1
        _tick(leader)
    assert not _warnings(caplog)
    assert leader.runtime.false_offsets == {}
    assert leader.rebalances_asked == 0  # no refusal to apply (and no follow-up wanted)
    assert out["m-good"].assignment != []


def test_without_broker_end_offsets_the_leader_plans_as_before(
    leader: Leader, caplog: pytest.LogCaptureFixture
) -> None:
    # A brand-new leader has read no end offsets yet: members' word stands, nothing is cut.
    leader.runtime.changelog_ends = {}
    others = {"m-good": _member("w2", generation=1, offsets={2: END + 30})}
    with caplog.at_level(logging.INFO):
        leader.assign(others)
    planned = [r.getMessage() for r in caplog.records if "planned generation" in r.getMessage()]
    assert "'offsets_beyond_end': 0" in planned[-1]


def _tick(leader: Leader) -> None:
    asyncio.run(leader.runtime.tick())
