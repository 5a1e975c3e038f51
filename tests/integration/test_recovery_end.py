"""Recovery ends where the changelog ends, on a real broker, whatever the last offsets hold.

Faust replays a changelog partition until a record with the end offset less one arrives. Under
exactly_once that offset is a commit marker, never delivered; an aborted transaction, records
compacted away or deleted leave the same hole. Each test here ends with the table's exact content
and checks that the replay ended on the consumer's position (streamapp's log line naming the
partition and its end offset), not through Faust's idle-timeout fallback (its "Aborted tx until
highwater" line), and that stores whose changelog no longer matches them are rebuilt with one
warning naming the table and partition.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete
from aiokafka.errors import KafkaError

from streamapp.kafka import LocalKafka
from streamapp.testing.kafka_io import create_topic
from streamapp.testing.worker import WorkerProcess

from .apps.recovery_end import (
    APP_ID_ENV,
    GUARANTEE_ENV,
    PARTITIONS,
    TABLE,
    changelog_topic,
    source_topic,
)

APP = "tests.integration.apps.recovery_end:app"
#: Faust's fallback, logged when an idle replay is ended by its timeouts (tables/recovery.py).
FAUST_FALLBACK = "Aborted tx until highwater"
ENDED_AT_END = "streamapp: replay ended at the changelog end offset"
RESUMED = "streamapp: processing resumed after"

Record = tuple[int, bytes | None, bytes | None]  # offset, key, value


def _use_app(monkeypatch: pytest.MonkeyPatch, app_id: str, guarantee: str) -> None:
    monkeypatch.setenv(APP_ID_ENV, app_id)
    monkeypatch.setenv(GUARANTEE_ENV, guarantee)


async def _produce(bootstrap: str, topic: str, keys: Iterable[tuple[str, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value in keys:
            await producer.send(topic, key=key.encode(), value=value)
        await producer.flush()
    finally:
        await producer.stop()


async def _produce_to(
    bootstrap: str,
    topic: str,
    partition: int,
    records: Iterable[tuple[bytes, bytes | None]],
    *,
    transactional_id: str | None = None,
    abort: bool = False,
) -> None:
    """Write ``records`` to one partition; with ``transactional_id`` in one transaction,
    committed (a commit marker ends it) or aborted."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    await producer.start()
    try:
        if transactional_id is not None:
            await producer.begin_transaction()
        for key, value in records:
            await producer.send_and_wait(topic, key=key, value=value, partition=partition)
        if transactional_id is not None:
            if abort:
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
    finally:
        await producer.stop()


async def _read(bootstrap: str, topic: str, partition: int, committed: bool = True) -> list[Record]:
    """Every record of one partition, from its log start to its end offset."""
    isolation = "read_committed" if committed else "read_uncommitted"
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        start = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]
        # An explicit seek: one to the beginning can race the reset the assignment started.
        consumer.seek(tp, start)
        records: list[Record] = []
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            records.extend((r.offset, r.key, r.value) for r in batch.get(tp, []))
        return records
    finally:
        await consumer.stop()


async def _offsets(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (log start offset, end offset), the end as a read_committed reader sees it."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        starts = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        return {tp.partition: (starts[tp], ends[tp]) for tp in tps}
    finally:
        await consumer.stop()


async def _create_changelog(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(topic, PARTITIONS, 1, topic_configs={"cleanup.policy": "compact", **config})]
        )
    finally:
        await admin.close()
    # aiokafka returns a refused topic as an error code, not an exception; a config refused
    # here would leave Faust to create the changelog without it, and the test to test nothing.
    errors = [(name, code, message) for name, code, message in response.topic_errors if code]
    assert not errors, errors


async def _delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(topic, partition): RecordsToDelete(before)})
    finally:
        await admin.close()


async def _recreate(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` and create it again, empty, as an operator would."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
        deadline = time.monotonic() + 60
        while True:
            try:
                # The broker refuses while the old topic is still being deleted.
                await admin.create_topics(
                    [NewTopic(topic, PARTITIONS, 1, topic_configs={"cleanup.policy": "compact"})]
                )
                return
            except KafkaError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
    finally:
        await admin.close()


class Run:
    """One run of a worker on a data dir: its log is appended to across runs, so only what this
    run wrote counts."""

    def __init__(self, bootstrap: str, data_dir: Path) -> None:
        self.worker = WorkerProcess(APP, bootstrap, data_dir)
        path = self.worker.log_path
        self.log_from = path.stat().st_size if path.exists() else 0

    def __enter__(self) -> Run:
        self.worker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.__exit__(*exc)

    def log(self) -> str:
        with self.worker.log_path.open("rb") as f:
            f.seek(self.log_from)
            return f.read().decode(errors="replace")

    def lines(self, needle: str) -> list[str]:
        return [line for line in self.log().splitlines() if needle in line]

    def wait_resumed(self, timeout: float = 180.0) -> None:
        """Until the worker has resumed processing after its first recovery."""
        deadline = time.monotonic() + timeout
        while not self.lines(RESUMED):
            process = self.worker.process
            assert process is not None
            if process.poll() is not None:
                raise AssertionError(f"worker exited:\n{self.worker.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the worker did not resume:\n{self.worker.log_tail()}")
            time.sleep(0.2)
        # The web views may come up just after.
        self.worker.wait_for("/counts/", lambda c: isinstance(c, dict), timeout=30)

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = self.worker.get_json("/counts/")
        return counts

    def assert_without_fallback(self) -> None:
        log = self.log()
        assert FAUST_FALLBACK not in log, log
        assert "Traceback" not in log and "ConsistencyError" not in log, log

    def assert_ended_at_end(self, ends: dict[str, int]) -> None:
        """A replay ended on the consumer's position at each ``topic[partition] -> end``."""
        lines = self.lines(ENDED_AT_END)
        for where, end in ends.items():
            assert any(f"{where}@{end}" in line for line in lines), (where, end, lines)


def _start_and_fill(
    bootstrap: str,
    app_id: str,
    data_dir: Path,
    events: list[tuple[str, bytes]],
    then: list[tuple[str, bytes]] | None = None,
    phase_size: int | None = None,
) -> dict[str, int]:
    """A worker on a fresh app processes ``events``, then ``then`` once those are in its table
    (its changelog writes for them come later, in transactions of their own), and stops
    cleanly; the table it built. With ``phase_size``, ``events`` go in phases of that many,
    each produced once the one before is in the table."""
    asyncio.run(create_topic(bootstrap, source_topic(app_id), PARTITIONS))
    size = phase_size or max(len(events), 1)
    phases = [events[i : i + size] for i in range(0, len(events), size)]
    with Run(bootstrap, data_dir) as run:
        run.wait_resumed()
        produced: list[tuple[str, bytes]] = []
        for phase in (*phases, then or []):
            if not phase:
                continue
            produced += phase
            expected = _counts(produced)
            asyncio.run(_produce(bootstrap, source_topic(app_id), phase))
            run.worker.wait_for("/counts/", lambda c, want=expected: c == want)
        assert run.worker.stop() == 0, run.worker.log_tail()
    return _counts(produced)


def _counts(events: list[tuple[str, bytes]]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for key, value in events:
        if value == b"delete":
            counts.pop(key, None)
        else:
            counts[key] += 1
    return dict(counts)


def _changelog_ends(bootstrap: str, app_id: str) -> dict[int, int]:
    return {
        p: end
        for p, (_start, end) in asyncio.run(_offsets(bootstrap, changelog_topic(app_id))).items()
    }


def test_a_transactional_changelog_ending_in_a_commit_marker(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_id = "it-recend-marker"
    _use_app(monkeypatch, app_id, "exactly_once")
    events = [(f"k{i % 7}", b"x") for i in range(70)]
    expected = _start_and_fill(kafka_bootstrap, app_id, tmp_path / "w1", events)

    changelog = changelog_topic(app_id)
    ends = _changelog_ends(kafka_bootstrap, app_id)
    for partition, end in ends.items():
        records = asyncio.run(_read(kafka_bootstrap, changelog, partition))
        # The last offset below the end is a commit marker: no reader is ever handed it.
        assert records and records[-1][0] < end - 1, (partition, end, records[-3:])
    by_partition = {f"{changelog}[{p}]": end for p, end in ends.items()}

    # Back on its own state: all there is to replay is the marker of each partition.
    with Run(kafka_bootstrap, tmp_path / "w1") as run:
        run.wait_resumed()
        assert run.counts() == expected
        run.assert_ended_at_end(by_partition)
        run.assert_without_fallback()
        assert run.worker.stop() == 0, run.worker.log_tail()

    # A worker with no state replays both changelogs in full.
    with Run(kafka_bootstrap, tmp_path / "w2") as run:
        run.wait_resumed()
        assert run.counts() == expected
        run.assert_ended_at_end(by_partition)
        run.assert_without_fallback()


def test_an_empty_changelog_and_one_of_an_aborted_transaction(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_id = "it-recend-empty"
    _use_app(monkeypatch, app_id, "exactly_once")
    changelog = changelog_topic(app_id)
    asyncio.run(create_topic(kafka_bootstrap, source_topic(app_id), PARTITIONS))
    asyncio.run(_create_changelog(kafka_bootstrap, changelog, {}))
    # Partition 0 stays empty; partition 1 holds one aborted record and its abort marker: its
    # end offset is 2, and no record is ever delivered from it.
    asyncio.run(
        _produce_to(
            kafka_bootstrap,
            changelog,
            1,
            [(b'"ghost"', b"5")],
            transactional_id=f"{app_id}-aborter",
            abort=True,
        )
    )
    assert asyncio.run(_offsets(kafka_bootstrap, changelog)) == {0: (0, 0), 1: (0, 2)}
    assert asyncio.run(_read(kafka_bootstrap, changelog, 1)) == []

    with Run(kafka_bootstrap, tmp_path / "w1") as run:
        run.wait_resumed()
        assert run.counts() == {}
        run.assert_ended_at_end({f"{changelog}[1]": 2})
        run.assert_without_fallback()
        # Events that arrive as the recovery ends (produced once the worker says it resumed,
        # while it seeks and resumes its flow) are each counted: one fetched between the seek
        # and the flow's resume was dropped from its stream's queue and committed past
        # (2 of 6 runs lost the first event before the stream partitions waited for both).
        events = [(f"k{i % 3}", b"x") for i in range(9)]
        asyncio.run(_produce(kafka_bootstrap, source_topic(app_id), events))
        run.worker.wait_for("/counts/", lambda c: c == _counts(events), timeout=60)


def _fold(records: list[Record]) -> dict[str, int]:
    """A table partition as its changelog records leave it (Faust writes keys and values as
    JSON; a record without a value deletes its key)."""
    table: dict[str, int] = {}
    for _offset, key, value in records:
        assert key is not None
        if value is None:
            table.pop(json.loads(key), None)
        else:
            table[json.loads(key)] = json.loads(value)
    return table


def test_a_changelog_trimmed_by_delete_records_past_the_local_offset(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_id = "it-recend-trimmed"
    _use_app(monkeypatch, app_id, "exactly_once")
    changelog = changelog_topic(app_id)
    # The broker refuses DeleteRecords on a compact-only topic; retention also trims a
    # changelog that compacts and deletes (a windowed table's).
    asyncio.run(_create_changelog(kafka_bootstrap, changelog, {"cleanup.policy": "compact,delete"}))
    events = [(f"k{i % 5}", b"x") for i in range(40)]
    _start_and_fill(kafka_bootstrap, app_id, tmp_path / "w1", events)
    _start, end = asyncio.run(_offsets(kafka_bootstrap, changelog))[0]
    assert end > 0
    # While the worker is down, partition 0 goes on (six new keys, in one committed
    # transaction), and DeleteRecords then drops everything before the third of them: the
    # store's next record (the commit marker at end - 1) and the two after it are gone.
    asyncio.run(
        _produce_to(
            kafka_bootstrap,
            changelog,
            0,
            [(f'"t{i}"'.encode(), b"7") for i in range(6)],
            transactional_id=f"{app_id}-writer",
        )
    )
    asyncio.run(_delete_records(kafka_bootstrap, changelog, 0, end + 2))
    assert asyncio.run(_offsets(kafka_bootstrap, changelog))[0] == (end + 2, end + 7)
    expected = {
        **_fold(asyncio.run(_read(kafka_bootstrap, changelog, 1))),
        **{f"t{i}": 7 for i in range(2, 6)},
    }

    with Run(kafka_bootstrap, tmp_path / "w1") as run:
        run.wait_resumed()
        assert run.counts() == expected
        [line] = run.lines("rebuilt from the changelog's start")
        assert (
            f"local store of table {TABLE} partition 0: changelog {changelog} starts at "
            f"{end + 2} but the local store needs its records from {end - 1} " in line
        ), line
        run.assert_ended_at_end({f"{changelog}[0]": end + 7})
        run.assert_without_fallback()


def test_a_changelog_deleted_and_recreated_while_the_worker_was_down(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_id = "it-recend-recreated"
    _use_app(monkeypatch, app_id, "exactly_once")
    events = [(f"k{i % 11}", b"x") for i in range(66)]
    _start_and_fill(kafka_bootstrap, app_id, tmp_path / "w1", events)
    changelog = changelog_topic(app_id)
    ends_before = _changelog_ends(kafka_bootstrap, app_id)
    assert all(end > 2 for end in ends_before.values()), ends_before
    asyncio.run(_recreate(kafka_bootstrap, changelog))
    # The new changelog: one committed record in partition 0 (then its commit marker), none
    # in partition 1.
    asyncio.run(
        _produce_to(
            kafka_bootstrap, changelog, 0, [(b'"k-new"', b"3")], transactional_id=f"{app_id}-w"
        )
    )
    assert _changelog_ends(kafka_bootstrap, app_id) == {0: 2, 1: 0}

    with Run(kafka_bootstrap, tmp_path / "w1") as run:
        run.wait_resumed()
        assert run.counts() == {"k-new": 3}
        lines = run.lines("rebuilt from the changelog (store moved to")
        assert len(lines) == 2, lines
        for partition, end in ((0, 2), (1, 0)):
            assert any(
                f"table {TABLE} partition {partition}: changelog {changelog} ends at {end} but "
                "the local store claims " in line
                for line in lines
            ), (partition, lines)
        run.assert_ended_at_end({f"{changelog}[0]": 2})
        run.assert_without_fallback()


def test_a_compacted_changelog_with_tombstones_and_gaps(
    kafka_broker: LocalKafka, kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_id = "it-recend-compacted"
    _use_app(monkeypatch, app_id, "exactly_once")
    changelog = changelog_topic(app_id)
    # Small segments that roll at once and a cleaner that takes any dirty log: the broker's
    # cleaner (which wakes every 15 s) really compacts it, and drops the tombstones after it.
    # Kafka 4.0 raised segment.bytes' minimum to 1 MiB (KIP-1030), which this changelog never
    # fills, so the active segment, which the cleaner never touches, would hold everything;
    # 4.x keeps the old minimum under the internal topic config its own tests use.
    small_segments = (
        "internal.segment.bytes" if kafka_broker.release.major >= 4 else "segment.bytes"
    )
    cleaner = {
        small_segments: "1024",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "100",
    }
    asyncio.run(_create_changelog(kafka_bootstrap, changelog, cleaner))
    # The broker refuses a record batch larger than a segment (RecordListTooLarge), and under
    # exactly_once the worker's producers linger 50 ms, which fills a batch past 1 KiB here:
    # its batches are kept under the segment's size (Faust's variable, read by the worker).
    monkeypatch.setenv("PRODUCER_MAX_BATCH_SIZE", "900")
    events = [(f"k{i % 6}", b"x") for i in range(180)]
    events += [("k0", b"delete"), ("k1", b"delete")]
    # A segment rolls only as a record is appended to it after segment.ms, and the cleaner
    # never touches the active one: the last writes come a moment later, so the segments
    # holding the first ones roll and are compacted whatever the transactions' sizes (with
    # every write in the active segment, half of each changelog stayed there, uncleaned).
    later = [(f"k{2 + i % 2}", b"x") for i in range(10)]
    # In phases of 6, one write of each key: the agent's stream sends a key's last write of a
    # run, and the changelog must hold superseded records (one per write) for the cleaner.
    expected = _start_and_fill(
        kafka_bootstrap, app_id, tmp_path / "w1", events, then=later, phase_size=6
    )
    assert "k0" not in expected and "k1" not in expected

    def holes() -> dict[int, int]:
        """partition -> records the cleaner removed (offsets below the end, not markers)."""
        removed = {}
        for partition in range(PARTITIONS):
            all_records = asyncio.run(_read(kafka_bootstrap, changelog, partition, False))
            offsets = [offset for offset, _key, _value in all_records]
            # Read uncommitted every record is delivered, so a missing offset between two is a
            # marker or a removed record; more missing than there can be markers is compaction.
            removed[partition] = offsets[-1] + 1 - len(offsets) if offsets else 0
        return removed

    written = {p: end for p, end in _changelog_ends(kafka_bootstrap, app_id).items()}
    deadline = time.monotonic() + 180
    while not all(n > written[p] // 2 for p, n in holes().items()):
        assert time.monotonic() < deadline, (holes(), written)
        time.sleep(2)
    # What remains is what a replay must rebuild the table from, tombstones included or not.
    remaining = {p: asyncio.run(_read(kafka_bootstrap, changelog, p)) for p in range(PARTITIONS)}
    assert {k: v for p in remaining for k, v in _fold(remaining[p]).items()} == expected

    # A worker with no state replays the compacted changelogs.
    with Run(kafka_bootstrap, tmp_path / "w2") as run:
        run.wait_resumed()
        assert run.counts() == expected
        run.assert_without_fallback()


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_changelog_records_the_table_cannot_decode_are_skipped(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guarantee: str
) -> None:
    # Before: each was skipped as it was decoded, so recovery never saw its offset. As the
    # partition's last record, the replay waited for it forever under at_least_once (Faust's
    # "No event received for active tp" every 5 s) and for its ~15 s fallback under
    # exactly_once.
    app_id = f"it-recend-undecodable-{guarantee.replace('_', '-')}"
    _use_app(monkeypatch, app_id, guarantee)
    events = [(f"k{i % 4}", b"x") for i in range(20)]
    expected = _start_and_fill(kafka_bootstrap, app_id, tmp_path / "w1", events)
    changelog = changelog_topic(app_id)
    first = _changelog_ends(kafka_bootstrap, app_id)[0]
    # Someone else writes to the changelog: a value that is not JSON, a record the table can
    # read, then a key that is not JSON, the partition's last record.
    asyncio.run(
        _produce_to(
            kafka_bootstrap,
            changelog,
            0,
            [(b'"k-bad-value"', b"{{ not json"), (b'"k-after"', b"4"), (b"\xff not json", b"1")],
        )
    )
    ends = _changelog_ends(kafka_bootstrap, app_id)
    assert ends[0] == first + 3
    expected = {**expected, "k-after": 4}

    def skipped_lines(run: Run) -> list[str]:
        return run.lines(f"streamapp: changelog record of table {TABLE} partition 0 at offset")

    # A worker with no state replays both changelogs in full, the bad records included.
    with Run(kafka_bootstrap, tmp_path / "w2") as run:
        run.wait_resumed(timeout=60)
        assert run.counts() == expected
        lines = skipped_lines(run)
        assert len(lines) == 2, lines
        assert (
            f"at offset {first} ({changelog}[0]@{first}) cannot be used: value cannot" in (lines[0])
        ), lines
        assert (
            f"at offset {first + 2} ({changelog}[0]@{first + 2}) cannot be used: key cannot"
            in (lines[1])
        ), lines
        # Counted as replayed (the progress and the end of the replay are true) and as skipped.
        [resumed] = run.lines(RESUMED)
        assert f", {sum(ends.values())} changelog records replayed" in resumed, resumed
        view = run.worker.get_json("/streamapp/assignment")
        assert view["bad_records"][changelog]["skipped"] == 2, view["bad_records"]
        run.assert_without_fallback()
        assert run.worker.stop() == 0, run.worker.log_tail()

    # Its store's offset is past them: back on its own state, nothing is skipped again.
    with Run(kafka_bootstrap, tmp_path / "w2") as run:
        run.wait_resumed(timeout=60)
        assert run.counts() == expected
        assert skipped_lines(run) == []
        run.assert_without_fallback()
