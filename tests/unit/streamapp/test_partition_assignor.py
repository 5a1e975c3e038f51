"""The Faust adapter on a real faust App and real rocksdict stores, without a broker.

The leader's ``assign()`` gets its partition counts from aiokafka's ``ClusterMetadata``; here a
small stand-in answers ``partitions_for_topic`` (what the adapter asks). What Kafka does with
the result is the integration tests' business (tests/integration/test_worker_rebalance.py).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace

import faust
import pytest
import rocksdict
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from faust.assignor import PartitionAssignor
from faust.types import TP

from assignor.metadata_codec import (
    MemberAssignment,
    MemberMetadata,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
)
from streamapp.group_scenario import kafka_partitions
from streamapp.partition_assignor import PROTOCOL_NAME, StreamappPartitionAssignor
from streamapp.runtime.commands import Commands
from streamapp.runtime.loop import FetchLoop
from streamapp.runtime.stores import STORE_URL
from streamapp.settings import StreamappSettings
from tables.inventory import OFFSET_KEY, read_persisted_offset

CHANGELOG = "sa-test-counts-changelog"


class Cluster:
    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self.counts.get(topic)
        return set(range(n)) if n else None


@pytest.fixture
def app(tmp_path: Path) -> faust.App:
    app = faust.App(
        "sa-test",
        store=STORE_URL,  # streamapp's RocksDB store, as streamapp.App's tables have
        datadir=str(tmp_path),
        PartitionAssignor=StreamappPartitionAssignor,
        web_port=6123,
    )
    app.Table("counts", default=int, partitions=4)
    app.streamapp_settings = StreamappSettings(client_id="w1", host="h1", rack="r1", capacity=2)  # type: ignore[attr-defined]
    return app


def _assignor(app: faust.App) -> StreamappPartitionAssignor:
    assert isinstance(app.assignor, StreamappPartitionAssignor)
    return app.assignor


def _store(app: faust.App, partition: int, offset: int) -> None:
    path = Path(app.conf.tabledir) / f"counts-{partition}.db"
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    db.put(OFFSET_KEY, str(offset).encode())
    db.close()


def _metadata(user_data: bytes, topics: list[str]) -> ConsumerProtocolMemberMetadata:
    return ConsumerProtocolMemberMetadata(4, topics, user_data)


def test_metadata_reports_identity_and_every_local_store(app: faust.App) -> None:
    _store(app, 1, 99)
    _store(app, 3, 0)
    assignor = _assignor(app)
    assert assignor.name == PROTOCOL_NAME
    meta = assignor.metadata({"words", CHANGELOG})
    assert sorted(meta.subscription) == sorted(["words", CHANGELOG])
    decoded = decode_metadata(meta.user_data)
    assert decoded.client_id == "w1"
    assert (decoded.host, decoded.rack, decoded.capacity) == ("h1", "r1", 2)
    assert decoded.offsets == {CHANGELOG: {1: 100, 3: 1}}
    assert decoded.url == str(app.conf.canonical_url)


def test_metadata_reads_the_offsets_of_stores_open_here_without_opening_them(
    app: faust.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store(app, 3, 0)  # on disk only
    store = app.tables["counts"].data
    store.set_persisted_offset(TP(CHANGELOG, 1), 99)  # opens its store, as a recovery does
    read: list[str] = []

    def reading(path: Path) -> int | None:
        read.append(path.name)
        return read_persisted_offset(path)

    monkeypatch.setattr("tables.inventory.read_persisted_offset", reading)
    decoded = decode_metadata(_assignor(app).metadata({"words", CHANGELOG}).user_data)
    assert decoded.offsets == {CHANGELOG: {1: 100, 3: 1}}
    assert read == ["counts-3.db"]
    store.set_persisted_offset(TP(CHANGELOG, 1), 120)
    decoded = decode_metadata(_assignor(app).metadata({"words", CHANGELOG}).user_data)
    assert decoded.offsets == {CHANGELOG: {1: 121, 3: 1}}
    assert read == ["counts-3.db"]  # unchanged since its read at the first join


def test_metadata_reports_what_recovery_applied_of_a_replica_beyond_its_store(
    app: faust.App,
) -> None:
    # Faust writes a replica's records to its store in batches (standby_buffer_size): the
    # records taken and still buffered count, as they are written before any promotion.
    _store(app, 1, 99)
    _store(app, 3, 500)
    app.streamapp_runtime = SimpleNamespace(  # type: ignore[attr-defined]
        replica_applied={TP(CHANGELOG, 1): 417, TP(CHANGELOG, 3): 400, TP(CHANGELOG, 2): 12},
        replica_ends={},
    )
    decoded = decode_metadata(_assignor(app).metadata({"words", CHANGELOG}).user_data)
    assert decoded.offsets == {CHANGELOG: {1: 417, 2: 12, 3: 501}}


def test_metadata_reports_the_warmups_of_the_last_assignment_apart_from_standbys(
    app: faust.App,
) -> None:
    assignor = _assignor(app)
    share = MemberAssignment(
        generation=2,
        active={"words": [0], CHANGELOG: [0]},
        standby={CHANGELOG: [1]},
        warmup={CHANGELOG: [3]},
        followup_rebalance=True,
        warmups_in_group=1,
    )
    assignor.on_assignment(
        ConsumerProtocolMemberAssignment(4, kafka_partitions(share), encode_assignment(share))
    )
    decoded = decode_metadata(assignor.metadata({"words", CHANGELOG}).user_data)
    assert (decoded.owned_standby, decoded.warmup) == ({CHANGELOG: [1]}, {CHANGELOG: [3]})
    # And after a restart before the follow-up (a clean stop, which waits for the ownership
    # record written off the consumer thread, and a new assignor on the same data dir).
    assert assignor.flush_ownership()
    restarted = decode_metadata(StreamappPartitionAssignor(app).metadata({"words"}).user_data)
    assert (restarted.generation, restarted.warmup) == (2, {CHANGELOG: [3]})


def test_leader_plans_and_members_apply_even_with_bad_metadata(
    app: faust.App, caplog: pytest.LogCaptureFixture
) -> None:
    assignor = _assignor(app)
    assignor.strategy = "sticky"  # strategy-agnostic: any plan() strategy will do here
    topics = ["words", CHANGELOG]
    good = encode_metadata(MemberMetadata(client_id="w2", url="http://w2:1"))
    members = {
        "m-self": assignor.metadata(set(topics)),
        "m-good": _metadata(good, topics),
        "m-garbage": _metadata(b"\x00garbage", topics),
        "m-truncated": _metadata(good[:-3], topics),
    }
    with caplog.at_level(logging.WARNING):
        out = assignor.assign(Cluster({"words": 4, CHANGELOG: 4}), members)
        assignor.assign(Cluster({"words": 4, CHANGELOG: 4}), members)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("m-garbage" in w for w in warnings) == 1  # one warning per member, not per round
    assert sum("m-truncated" in w and "given no partitions" in w for w in warnings) == 1
    # Unreadable metadata: no work at all, the readable members share everything.
    assert out["m-garbage"].assignment == [] and out["m-truncated"].assignment == []
    owned: dict[str, set[int]] = {}
    for assignment in (out["m-self"], out["m-good"]):
        share = decode_assignment(assignment.user_data)
        for topic, parts in share.active.items():
            assert not owned.setdefault(topic, set()) & set(parts)
            owned[topic] |= set(parts)
        assert share.generation == 1
    assert owned == {"words": {0, 1, 2, 3}, CHANGELOG: {0, 1, 2, 3}}

    mine = out["m-self"]
    assignor.on_assignment(mine)
    share = decode_assignment(mine.user_data)
    expected = {TP(t, p) for t, ps in share.active.items() for p in ps}
    assert assignor.assigned_actives() == expected
    assert assignor.is_active(next(iter(expected)))
    url = str(app.conf.canonical_url)
    assert assignor.tables_metadata()[url] == {
        t: ps for t, ps in share.active.items() if t == CHANGELOG
    }
    assert assignor.external_topics_metadata()[url] == {
        t: ps for t, ps in share.active.items() if t == "words"
    }
    again = decode_metadata(assignor.metadata(set(topics)).user_data)
    assert again.generation == 1 and again.owned_active == share.active

    # A restart (a clean stop, then a new assignor on the same data dir) reports what was held,
    # generation and all.
    assert assignor.flush_ownership()
    restarted = StreamappPartitionAssignor(app)
    kept = decode_metadata(restarted.metadata(set(topics)).user_data)
    assert (kept.generation, kept.owned_active) == (1, share.active)


def test_stock_faust_member_is_refused_with_what_to_do(
    app: faust.App, caplog: pytest.LogCaptureFixture
) -> None:
    assignor = _assignor(app)
    assignor.strategy = "sticky"
    stock_app = faust.App("sa-test", store="rocksdb://", web_port=6124)
    stock_assignor = stock_app.assignor
    assert isinstance(stock_assignor, PartitionAssignor)
    stock = stock_assignor.metadata({"words"})
    with caplog.at_level(logging.WARNING):
        out = assignor.assign(
            Cluster({"words": 2}),
            {
                "m-self": assignor.metadata({"words"}),
                "m-stock": _metadata(stock.user_data, ["words"]),
            },
        )
    assert out["m-stock"].assignment == []
    assert any(
        "m-stock" in r.getMessage() and "streamapp worker -A" in r.getMessage()
        for r in caplog.records
    )
    assert decode_assignment(out["m-self"].user_data).active == {"words": [0, 1]}


def test_global_tables_are_everywhere_and_not_planned(tmp_path: Path) -> None:
    app = faust.App(
        "sa-global",
        store="rocksdb://",
        datadir=str(tmp_path),
        PartitionAssignor=StreamappPartitionAssignor,
    )
    app.GlobalTable("settings", default=int, partitions=3)
    assignor = _assignor(app)
    assignor.strategy = "sticky"
    topics = ["words", "sa-global-settings-changelog"]
    other = encode_metadata(MemberMetadata(client_id="w2", url="http://w2:1"))
    out = assignor.assign(
        Cluster({"words": 2, "sa-global-settings-changelog": 3}),
        {"m-1": assignor.metadata(set(topics)), "m-2": _metadata(other, topics)},
    )
    shares = {m: decode_assignment(a.user_data) for m, a in out.items()}
    for share in shares.values():
        assert share.active["sa-global-settings-changelog"] == [0, 1, 2]
    assert sorted(p for s in shares.values() for p in s.active.get("words", [])) == [0, 1]


async def test_the_leaders_metadata_refreshes_end_before_its_consumer_stops(
    app: faust.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan that left a topic out starts refreshes on the worker's loop; the fetch loop's
    close cancels them and waits until they ended, then stops the consumer. Nothing is left
    pending on the loop, nothing asks a stopped consumer."""
    assignor = _assignor(app)
    assignor.strategy = "sticky"
    topics = ["words", CHANGELOG]
    before = asyncio.all_tasks()
    assignor.assign(Cluster({"words": 4}), {"m-self": assignor.metadata(set(topics))})
    (refreshes,) = asyncio.all_tasks() - before  # CHANGELOG left out: refreshes started
    seen_at_consumer_stop: list[bool] = []

    class Client:
        async def stop(self) -> None:
            seen_at_consumer_stop.append(refreshes.done())

    fetch_loop = FetchLoop(SimpleNamespace(app=app, commands=Commands()))  # type: ignore[arg-type]
    fetch_loop.client = Client()  # type: ignore[assignment]
    await fetch_loop.close()
    assert seen_at_consumer_stop == [True]
    assert refreshes.cancelled()
    assert asyncio.all_tasks() == before
