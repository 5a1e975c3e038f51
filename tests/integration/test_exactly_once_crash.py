"""A worker killed mid-transaction under exactly_once keeps every store, on a real broker.

Under exactly_once streamapp's stores are transactional: a table write reaches RocksDB only once
the transaction that carried its changelog record has committed. The test starts one worker,
then a second that takes over one partition through a warmup and replicates the other as a
standby; holds the second's agent in the middle of a record (its write made and its changelog
record sent, its transaction open: `apps.recovery_end`, whose holding worker reads a stream
acked by hand, iterated by Faust record by record, so that the held record's changelog record
is sent before it is processed), kills it with SIGKILL there, writes more while it is down, and
restarts it; the first worker's agent takes its records in runs. Checked:

- nothing is discarded: both stores are the same RocksDB (IDENTITY) before and after;
- the active's store as the kill left it holds exactly the committed changelog up to its
  offset, and not the write of the open transaction;
- the restarted worker replays only what its stores' offsets do not cover, and the table ends
  exact.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import rocksdict
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner

from streamapp.testing.kafka_io import create_topic
from streamapp.testing.worker import WorkerProcess
from tables.inventory import OFFSET_KEY, read_persisted_offset

from .apps.recovery_end import (
    APP_ID_ENV,
    GUARANTEE_ENV,
    HOLD_FILE_ENV,
    PARTITIONS,
    STANDBYS_ENV,
    TABLE,
    changelog_topic,
    source_topic,
)
from .replica_lag import unmeasured_replicas, unsettled_replicas
from .workers import wait_for_workers

APP = "tests.integration.apps.recovery_end:app"
APP_ID = "it-eos-crash-stores"
SOURCE = source_topic(APP_ID)
CHANGELOG = changelog_topic(APP_ID)
DISCARDING = "streamapp: discarding "
HOLDING = "HOLDING "
# Events produced while both workers run: enough for 1000 on each changelog partition.
REPLICATED = 3600


async def _produce(bootstrap: str, events: list[tuple[str, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value in events:
            await producer.send(SOURCE, key=key.encode(), value=value)
        await producer.flush()
    finally:
        await producer.stop()


async def _closed_ends(bootstrap: str) -> dict[int, int] | None:
    """partition -> the changelog's end when no transaction is open on it; None while one is.

    The table's view shows a write as soon as it is made, before its transaction
    commits; a committed end read then (the last stable offset) stops at that transaction's
    first record, and the commit adds its records and marker afterwards (one run read 1747,
    and w2 replayed to 1756: 8 records written 0.7 s before their commit marker, and the
    marker). A replica judged against such an end looks caught up while the open
    transaction's records are still to come to it. So the end counts once the last stable
    offset is the log's end.
    """
    ends, log_ends = await _stable_and_log_ends(bootstrap)
    return ends if ends == log_ends else None


async def _stable_and_log_ends(bootstrap: str) -> tuple[dict[int, int], dict[int, int]]:
    """partition -> the changelog's last stable offset (the committed end, as a
    ``read_committed`` reader sees it), and partition -> its log end: below the log end while
    a transaction is open on the partition."""
    committed = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    written = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted")
    await committed.start()
    await written.start()
    try:
        tps = [TopicPartition(CHANGELOG, p) for p in range(PARTITIONS)]
        ends = await committed.end_offsets(tps)
        log_ends = await written.end_offsets(tps)
        return (
            {tp.partition: ends[tp] for tp in tps},
            {tp.partition: log_ends[tp] for tp in tps},
        )
    finally:
        await committed.stop()
        await written.stop()


async def _changelog_ends(bootstrap: str) -> dict[int, int]:
    """partition -> the changelog's end, once no transaction is open on it (`_closed_ends`)."""
    for _attempt in range(300):  # a minute at most: the app commits every 0.5 s
        ends = await _closed_ends(bootstrap)
        if ends is not None:
            return ends
        await asyncio.sleep(0.2)
    raise AssertionError("a transaction on the changelog stays open for a minute")


async def _open_transaction(bootstrap: str, partition: int) -> bool:
    """Whether the changelog partition has records of a transaction not committed yet (its
    last stable offset is below its end)."""
    ends, log_ends = await _stable_and_log_ends(bootstrap)
    return ends[partition] < log_ends[partition]


async def _committed_records(bootstrap: str, partition: int) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every committed record of the changelog partition so far."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(CHANGELOG, partition)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        consumer.seek(tp, 0)
        found = []
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            found += [(r.offset, r.key, r.value) for r in batch.get(tp, [])]
        return found
    finally:
        await consumer.stop()


def _store_on_disk(path: Path) -> tuple[dict[bytes, bytes], int | None]:
    """What the store at ``path`` holds (read-only, as a restart finds it), and its offset."""
    db = rocksdict.Rdict(
        str(path),
        options=rocksdict.Options(raw_mode=True),
        access_type=rocksdict.AccessType.read_only(),
    )
    try:
        rows = dict(db.items())
    finally:
        db.close()
    raw = rows.pop(OFFSET_KEY, None)
    return rows, None if raw is None else int(raw)


async def _lag_when_replicated(bootstrap: str) -> tuple[dict[int, int], dict[int, int]]:
    """partition -> the lag a replica that applied every committed record shows: the offsets
    after the last record (its commit marker), which no replica is handed; and partition -> the
    changelog's committed end."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(CHANGELOG, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        last: dict[int, int] = {}
        for tp in tps:
            consumer.seek(tp, 0)
            while await consumer.position(tp) < ends[tp]:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                for record in batch.get(tp, []):
                    last[tp.partition] = record.offset
        lag = {tp.partition: ends[tp] - (last.get(tp.partition, -1) + 1) for tp in tps}
        return lag, {tp.partition: ends[tp] for tp in tps}
    finally:
        await consumer.stop()


class Group:
    def __init__(self, bootstrap: str, root: Path) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.workers: dict[str, WorkerProcess] = {}
        self.expected: Counter[str] = Counter()
        self.hold_file = root / "hold"

    def start(self, name: str, *, holding: bool = False) -> WorkerProcess:
        """Start (or restart) worker ``name``; a ``holding`` one holds a ``hold`` record while
        the hold file exists, its agent reading a stream acked by hand (`apps.recovery_end`)."""
        env = {HOLD_FILE_ENV: str(self.hold_file)} if holding else {}
        worker = self.workers.get(name) or WorkerProcess(
            APP, self.bootstrap, self.root / name, env=env
        )
        self.workers[name] = worker
        return worker.start()

    def produce(self, count: int, keys: int = 12, value: bytes = b"x") -> None:
        events = [(f"k{i % keys}", value) for i in range(count)]
        self.expected.update(key for key, _ in events)
        asyncio.run(_produce(self.bootstrap, events))

    def produce_key(self, key: str, value: bytes) -> None:
        self.expected[key] += 1
        asyncio.run(_produce(self.bootstrap, [(key, value)]))

    def view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.workers[name].get_json("/streamapp/assignment")
        return view

    def live(self) -> dict[str, WorkerProcess]:
        return {n: w for n, w in self.workers.items() if w.alive()}

    def settled(self) -> bool:
        """Every partition active exactly once and processing, replicas caught up, the table
        exact."""
        views = {name: self.view(name) for name in self.live()}
        held = [p for v in views.values() for p in v["active"].get(CHANGELOG, [])]
        if sorted(held) != list(range(PARTITIONS)):
            return False
        for v in views.values():
            if v["followup_pending"] or not v["history"] or v["warmup"]:
                return False
            if v["history"][-1]["plan_generation"] != v["plan_generation"]:
                return False
        if unmeasured_replicas(views):
            return False
        table: dict[str, int] = {}
        for worker in self.live().values():
            table.update(worker.get_json("/counts/"))
        if table != dict(self.expected):
            return False
        # Under exactly_once a replica that applied every record is still behind the end by
        # the commit marker after the last one (the lag streamapp reports counts offsets).
        # A worker measures its lags once a second: one measured before the last events'
        # records reached the changelog says nothing of them (a CI run killed w2 while its
        # standby had not yet taken most of them, reported caught up by a lag measured before
        # they were produced), so a lag counts once the end it was measured against is the end
        # (the committed end, read_committed as the app reads), and while no transaction is
        # open: the committed end stops at an open one's first record, which no replica has
        # had yet (a run killed w2 with its standby at offset 79, judged caught up against a
        # committed end of 80 while w1's transaction of ~2400 records was still open).
        if asyncio.run(_closed_ends(self.bootstrap)) is None:
            return False
        replicated, ends = asyncio.run(_lag_when_replicated(self.bootstrap))
        return not unsettled_replicas(views, {CHANGELOG: ends}, allowed={CHANGELOG: replicated})

    def wait_settled(self, what: str, timeout: float = 150.0) -> None:
        wait_for_workers(self.live(), what, self.settled, timeout=timeout, details=self.summary)

    def summary(self) -> str:
        lines = []
        for name in self.live():
            try:
                v = self.view(name)
                counts = self.workers[name].get_json("/counts/")
            except OSError as exc:
                lines.append(f"{name}: no view ({exc})")
                continue
            lines.append(
                f"{name}: active {v['active'].get(CHANGELOG)} standby {v['standby']} "
                f"warmup {v['warmup']} lag {v['replica_lag']} (ends {v['replica_ends']}) "
                f"followup {v['followup_pending']} "
                f"counts {counts}"
            )
        return "\n".join(lines) + f"\nexpected {dict(self.expected)}"


def _partition_of(key: str) -> int:
    partitions = list(range(PARTITIONS))
    return int(DefaultPartitioner()(key.encode(), partitions, partitions))


def _records_per_partition(count: int, keys: int) -> Counter[int]:
    """How many of ``Group.produce(count, keys)``'s events each source partition gets: the
    producer's default partitioner (murmur2 of the key), as the test's producer uses it."""
    partitioner = DefaultPartitioner()
    partitions = list(range(PARTITIONS))
    return Counter(
        partitioner(f"k{i % keys}".encode(), partitions, partitions) for i in range(count)
    )


def _ever_active(view: dict[str, Any]) -> set[int]:
    return {p for entry in view["history"] for p in entry["active"].get(CHANGELOG, [])}


def _log_since(worker: WorkerProcess, start: int) -> str:
    with worker.log_path.open("rb") as f:
        f.seek(start)
        return f.read().decode(errors="replace")


def test_a_worker_killed_mid_transaction_keeps_every_store_and_replays_only_the_tail(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(APP_ID_ENV, APP_ID)
    monkeypatch.setenv(GUARANTEE_ENV, "exactly_once")
    monkeypatch.setenv(STANDBYS_ENV, "1")
    asyncio.run(create_topic(kafka_bootstrap, SOURCE, PARTITIONS))
    group = Group(kafka_bootstrap, tmp_path)
    try:
        group.start("w1")
        group.produce(120)
        group.wait_settled("w1 alone, every partition active")
        # w2 joins with nothing: a warmup catches up and takes one partition over, a standby
        # replicates the other, which is never active on w2.
        group.start("w2", holding=True)
        group.wait_settled("w2 taking one partition over")
        # At least 1000 changelog records on each partition, so that the standby's persisted
        # offset, read from its store after the kill, shows it replicated them (each batch a
        # standby applies is stored with its offset). A run of an agent's records sends one
        # changelog record per key written (its last value), so each event gets a key of its
        # own: one changelog record each. Which partition w2 replicates is the plan's choice:
        # each partition must get 1000 on its own.
        assert min(_records_per_partition(REPLICATED, keys=REPLICATED).values()) >= 1000
        group.produce(REPLICATED, keys=REPLICATED)
        group.wait_settled("the events processed and replicated", timeout=300)
        view = group.view("w2")
        [active] = view["active"][CHANGELOG]
        [standby] = view["standby"][CHANGELOG]
        assert _ever_active(view) == {active}, view["history"]

        # w2's agent makes a write and holds: its transaction stays open, its changelog record
        # sent and not committed, and w2 is killed there.
        victim = group.workers["w2"]
        log_from = victim.log_path.stat().st_size
        [held_key] = [k for k in (f"k{i}" for i in range(12)) if _partition_of(k) == active][:1]
        group.hold_file.write_text("hold")
        group.produce_key(held_key, b"hold")
        wait_for_workers(
            group.live(),
            "w2 holding a record with its transaction open",
            lambda: (
                HOLDING + held_key in _log_since(victim, log_from)
                and asyncio.run(_open_transaction(kafka_bootstrap, active))
            ),
            timeout=60,
        )
        victim.stop(signal.SIGKILL)
        group.hold_file.unlink()
        [standby_store] = [p for p in victim.data_dir.rglob(f"{TABLE}-{standby}.db") if p.is_dir()]
        [active_store] = [p for p in victim.data_dir.rglob(f"{TABLE}-{active}.db") if p.is_dir()]
        identities = {p: (p / "IDENTITY").read_text() for p in (active_store, standby_store)}
        offsets = {p: read_persisted_offset(p) for p in (active_store, standby_store)}
        assert offsets[standby_store] is not None and offsets[standby_store] >= 999, offsets

        # The active's store holds the committed changelog up to its offset, exactly: not the
        # write of the transaction the kill left open (which its next owner's start aborts).
        data, offset = _store_on_disk(active_store)
        assert offset is not None
        committed = asyncio.run(_committed_records(kafka_bootstrap, active))
        assert offset in {o for o, _, _ in committed}, (offset, committed[-3:])
        expected_data: dict[bytes, bytes] = {}
        for record_offset, key, value in committed:
            if record_offset <= offset:
                expected_data[key] = value
        assert data == expected_data
        # The table's keys are JSON: the held write (the key's last count) is not there.
        assert data[f'"{held_key}"'.encode()] == str(group.expected[held_key] - 1).encode()

        # w1 takes everything back; more events while w2 is down, for every partition.
        group.wait_settled("w1 taking over")
        group.produce(96)
        group.wait_settled("the events while w2 is down")
        ends = asyncio.run(_changelog_ends(kafka_bootstrap))
        assert ends[standby] > offsets[standby_store] + 1

        log_from = victim.log_path.stat().st_size
        group.start("w2", holding=True)
        group.wait_settled("w2 back")
        log = _log_since(victim, log_from)
        assert DISCARDING not in log, log
        # Both stores are the same RocksDB (never rebuilt)...
        for path, identity in identities.items():
            assert (path / "IDENTITY").read_text() == identity, path
        # ... and what w2 replayed since it came back is each store's tail past its offset.
        back = group.view("w2")
        replayed: Counter[int] = Counter()
        for entry in back["history"]:
            for p, n in entry["by_partition"].get(CHANGELOG, {}).items():
                replayed[int(p)] += n
        for path, partition in ((active_store, active), (standby_store, standby)):
            persisted = offsets[path]
            assert persisted is not None
            tail = ends[partition] - (persisted + 1)
            assert replayed[partition] <= tail, (partition, replayed, ends, offsets)
        assert "Traceback" not in log, log
    finally:
        if group.hold_file.exists():
            group.hold_file.unlink()
        for worker in group.workers.values():
            if worker.alive():
                worker.stop()
