"""Transactional stores under exactly_once (`streamapp.runtime.stores`,
`streamapp.runtime.store_commits`): a table's writes wait apart, seen by reads, until the
transactions of the records that made them commit, and then reach RocksDB with the changelog
offset in one write batch; an aborted transaction's writes never do. Real rocksdict stores in a
temporary directory, no broker: the commits and revocations are the table manager's calls."""

from __future__ import annotations

import logging
import tempfile
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import rocksdict
from faust.streams import _current_event
from faust.types import TP
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamapp
from streamapp.runtime.commits import Committer
from streamapp.runtime.pending_writes import OFFSET_KEY, entry_size
from streamapp.table_writes.batch_table import BatchTable

SOURCE = "events"
PARTITIONS = 3


@dataclass
class _Message:
    topic: str
    partition: int

    @property
    def tp(self) -> TP:
        return TP(self.topic, self.partition)


@dataclass
class _Event:
    message: _Message


@pytest.fixture
def in_partition() -> Iterator[Callable[[int], None]]:
    """Runs code as an agent does, on a record of the source partition the test sets."""
    events: list[_Event] = []

    def enter(partition: int) -> None:
        events.append(_Event(_Message(SOURCE, partition)))
        _current_event.set(weakref.ref(events[-1]))  # type: ignore[arg-type]

    token = _current_event.set(None)
    try:
        yield enter
    finally:
        _current_event.reset(token)


def _app(datadir: Path, **kwargs: Any) -> Any:
    app = streamapp.App("txn", datadir=str(datadir), processing_guarantee="exactly_once", **kwargs)
    app.in_worker = True  # Faust runs transactions in a worker only
    return app


def _on_disk(path: Path) -> tuple[dict[bytes, bytes], int | None]:
    """What a store holds on disk (what a restart after a crash finds), and its offset."""
    if not path.exists():
        return {}, None
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


def test_writes_wait_for_their_transaction_and_reads_see_them(
    tmp_path: Path, in_partition: Callable[[int], None]
) -> None:
    app = _app(tmp_path)
    table = app.Table("counts", partitions=4)
    store = table.data
    assert store.transactional
    changelog = table.changelog_topic.get_topic_name()
    in_partition(1)
    store["a"] = 1
    store["b"] = 2
    del store["b"]
    app.tables.persist_offset_on_commit(store, TP(changelog, 1), 5)
    assert store["a"] == 1 and "b" not in store
    store.handles.close_all()
    assert _on_disk(store.partition_path(1)) == ({}, None)  # nothing stored yet
    # A commit of another partition's transaction stores none of them.
    app.tables.on_commit({TP(SOURCE, 2): 3})
    store.handles.close_all()
    assert _on_disk(store.partition_path(1)) == ({}, None)
    # Its own: data and offset together, the deletion applied.
    app.tables.on_commit({TP(SOURCE, 1): 10})
    assert store.pending_bytes() == 0 and store["a"] == 1
    store.handles.close_all()
    assert _on_disk(store.partition_path(1)) == ({b'"a"': b"1"}, 5)


def test_the_offset_alone_waits_for_the_writes_before_it(
    tmp_path: Path, in_partition: Callable[[int], None]
) -> None:
    app = _app(tmp_path)
    table = app.Table("counts", partitions=4)
    store = table.data
    tp = TP(table.changelog_topic.get_topic_name(), 2)
    store.write(2, {b'"a"': b"1"}, offset=3)
    in_partition(2)
    store["a"] = 2
    store.set_persisted_offset(tp, 9)  # its write is not stored: the offset would run ahead
    assert store.persisted_offset(tp) == 3


def test_an_aborted_or_revoked_transactions_writes_are_dropped(
    tmp_path: Path, in_partition: Callable[[int], None], caplog: pytest.LogCaptureFixture
) -> None:
    app = _app(tmp_path)
    table = app.Table("counts", partitions=4)
    store = table.data
    changelog = table.changelog_topic.get_topic_name()
    for partition in (1, 2, 3):
        store.write(partition, {b'"a"': b"0"}, offset=0)
        in_partition(partition)
        store["a"] = partition
        app.tables.persist_offset_on_commit(store, TP(changelog, partition), 7)
    with caplog.at_level(logging.INFO, logger="streamapp.runtime.store_commits"):
        # Partition 1 given up after its last commit, which did not cover this write.
        app.tables.on_revoked_after_commit({TP(SOURCE, 1), TP(changelog, 1)})
    assert [r.getMessage() for r in caplog.records] == [
        f"streamapp: 1 uncommitted writes of {changelog} 1 dropped: given up before their "
        "transactions committed"
    ]
    assert store.read(1, b'"a"') == b"0" and store.read(2, b'"a"') == b"2"
    # A rebalance ends: partition 2 is no longer active here, partition 3 was gained again.
    kept = {TP(changelog, 2), TP(changelog, 3)}
    app.tables.store_commits.on_assigned(kept, {TP(changelog, 3)}, {TP(changelog, 3)})
    assert store.pending_partitions() == {}
    assert app.tables.store_commits.pending_offsets == {}
    app.tables.on_commit({TP(SOURCE, p): 9 for p in (1, 2, 3)})
    store.handles.close_all()
    for partition in (1, 2, 3):
        assert _on_disk(store.partition_path(partition)) == ({b'"a"': b"0"}, 0)


def test_a_stopping_worker_stores_what_its_last_commit_commits(
    tmp_path: Path, in_partition: Callable[[int], None]
) -> None:
    # Faust's app tells the tables that every partition is revoked as the worker stops, before
    # the consumer's last commit: the writes that commit covers are stored, not dropped.
    app = _app(tmp_path)
    table = app.Table("counts", partitions=4)
    store = table.data
    changelog = table.changelog_topic.get_topic_name()
    in_partition(1)
    store["a"] = 1
    app.tables.persist_offset_on_commit(store, TP(changelog, 1), 4)
    app.tables.on_partitions_revoked({TP(SOURCE, 1), TP(changelog, 1)})
    assert store.pending_partitions() == {1: {TP(SOURCE, 1)}}
    app.tables.on_commit({TP(SOURCE, 1): 6})
    store.handles.close_all()
    assert _on_disk(store.partition_path(1)) == ({b'"a"': b"1"}, 4)


def test_a_batch_left_unfinished_puts_back_what_earlier_batches_have_pending(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path)
    table = app.Table("counts", partitions=4)
    store = table.data
    source = TP(SOURCE, 1)
    first = BatchTable(table, store, 1, None, source)
    first.set("a", 1, b'"a"', b"1")
    first.set("b", 2, b'"b"', b"2")
    first.finish()
    pending = store.pending(1)
    assert pending.writes == {b'"a"': b"1", b'"b"': b"2"}
    assert pending.size == entry_size(b'"a"', b"1") + entry_size(b'"b"', b"2")
    assert pending.sources == {source}
    assert store.handle(1).get(b'"a"') is None  # waits for the transaction

    second = BatchTable(table, store, 1, None, source)
    second.set("a", 5, b'"a"', b"55")
    second.delete(b'"b"')
    second.set("c", 3, b'"c"', b"3")
    assert store.read(1, b'"a"') == b"55" and store.read(1, b'"b"') is None
    second.discard()
    assert pending.writes == {b'"a"': b"1", b'"b"': b"2"}
    third = BatchTable(table, store, 1, None, source)
    third.set("a", 5, b'"a"', b"55")
    third.delete(b'"b"')
    third.finish()
    assert pending.size == entry_size(b'"a"', b"55") + entry_size(b'"b"', None)
    app.tables.on_commit({source: 4})
    assert pending.size == 0
    assert dict(store.items_of(1)) == {b'"a"': b"55"}


def test_the_worker_commits_early_once_the_pending_writes_are_full(
    tmp_path: Path, in_partition: Callable[[int], None]
) -> None:
    app = _app(tmp_path, eos_pending_writes_max_bytes=1_000)
    store = app.Table("counts", partitions=4).data
    consumer = SimpleNamespace(
        app=app,
        in_transaction=True,
        commit_every=None,
        commit_interval=3600.0,
        ledger=SimpleNamespace(acks_since_reset=0),
    )
    committer = Committer(consumer, None)  # type: ignore[arg-type]
    in_partition(0)
    written = 0
    while written + entry_size(b'"k00"', b"x" * 100) < 1_000:
        store[f"k{written:02}"] = "x" * 98  # JSON: 100 bytes with its quotes
        written += entry_size(b'"k00"', b"x" * 100)
        assert not committer.due()
    store["last"] = "x" * 98
    assert app.tables.pending_bytes() >= 1_000
    assert committer.due() and committer.early_commits == 1


async def test_the_worker_reports_what_its_pending_writes_took_at_most(
    tmp_path: Path, in_partition: Callable[[int], None]
) -> None:
    """The peak is taken at each commit, before the commit stores the writes."""
    app = _app(tmp_path)
    store = app.Table("counts", partitions=4).data
    source = TP(SOURCE, 0)
    handed_out: dict[TP, int] = {}

    async def _settled(*_: Any) -> bool:
        return True

    async def _commit(offsets: Any, start_new_transaction: bool) -> bool:
        return True

    async def _flush() -> None:
        return None

    consumer = SimpleNamespace(
        app=SimpleNamespace(
            tables=app.tables,
            monitor=app.monitor,
            conf=app.conf,
            streamapp_settings=app.streamapp_settings,
            producer=SimpleNamespace(flush=_flush),
        ),
        in_transaction=True,
        assigned={source},
        wait_for_acks=_settled,
        transactions=SimpleNamespace(commit=_commit),
        ledger=SimpleNamespace(
            pending=lambda partitions: 0,
            committable=lambda partitions: dict(handed_out),
            committed=lambda offsets: handed_out.clear(),
        ),
    )
    committer = Committer(consumer, None)  # type: ignore[arg-type]
    in_partition(0)
    sizes = []
    for count in (3, 7, 2):
        for n in range(count):
            store[f"key-{count}-{n}"] = "v" * 10
        sizes.append(app.tables.pending_bytes())
        handed_out[source] = count
        assert await committer.commit_between_records(None, start_new_transaction=True)
        assert app.tables.pending_bytes() == 0
    assert committer.transactions == 3
    assert committer.pending_peak_bytes == max(sizes) == sizes[1] > sizes[0]
    summary = committer.summary()
    assert summary is not None and f"{max(sizes):,} bytes" in summary and "3 commits" in summary


# -- The persisted offset never runs ahead of the data, whatever a crash interrupts --


class _Crash(Exception):
    """The process dies here: this write and every one after it never reach the disk."""


class _CrashingHandle:
    """A partition's handle whose writes each spend one of the writes ``left``; the first one
    past them crashes."""

    def __init__(self, db: Any, left: list[int]) -> None:
        self.db = db
        self.left = left

    def _spend(self) -> None:
        if self.left[0] == 0:
            raise _Crash
        self.left[0] -= 1

    def put(self, key: bytes, value: bytes) -> None:
        self._spend()
        self.db.put(key, value)

    def delete(self, key: bytes) -> None:
        self._spend()
        self.db.delete(key)

    def write(self, batch: Any) -> None:
        self._spend()
        self.db.write(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


@dataclass
class _Record:
    offset: int
    key: bytes
    value: bytes | None
    transaction: int


_partition = st.integers(0, PARTITIONS - 1)
_op = st.one_of(
    st.tuples(st.just("write"), _partition, st.sampled_from("abc"), st.integers(0, 9)),
    st.tuples(st.just("delete"), _partition, st.sampled_from("abc")),
    st.tuples(st.just("commit"), st.frozensets(_partition, min_size=1)),
    st.tuples(st.just("revoke"), _partition),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_op, max_size=30), writes_left=st.one_of(st.none(), st.integers(0, 12)))
def test_a_store_holds_exactly_the_committed_changelog_up_to_its_offset(
    ops: list[tuple[Any, ...]], writes_left: int | None
) -> None:
    """Writes, commits and revocations (aborted transactions) of a few source partitions, the
    process dying at any write to RocksDB (or not at all): each store on disk holds exactly its
    changelog's committed records up to the offset it claims, so the replay of the committed
    records past it rebuilds the committed state."""
    with tempfile.TemporaryDirectory() as tmp:
        _run(Path(tmp), ops, writes_left)


def _run(datadir: Path, ops: list[tuple[Any, ...]], writes_left: int | None) -> None:
    app = _app(datadir)
    table = app.Table("counts", partitions=PARTITIONS)
    store = table.data
    changelog = table.changelog_topic.get_topic_name()
    records: dict[int, list[_Record]] = {p: [] for p in range(PARTITIONS)}
    transaction = dict.fromkeys(range(PARTITIONS), 0)
    committed: set[tuple[int, int]] = set()
    left = [1_000_000 if writes_left is None else writes_left]
    for partition in range(PARTITIONS):
        store.handles.open[partition] = _CrashingHandle(store.handle(partition), left)
    events: list[_Event] = []
    token = _current_event.set(None)
    try:
        for op in ops:
            if op[0] in ("write", "delete"):
                partition, key = op[1], f'"{op[2]}"'.encode()
                value = None if op[0] == "delete" else str(op[3]).encode()
                events.append(_Event(_Message(SOURCE, partition)))
                _current_event.set(weakref.ref(events[-1]))  # type: ignore[arg-type]
                if value is None:
                    store.delete_bytes(key)
                else:
                    store.set_bytes(key, value)
                offset = len(records[partition])  # one record per write (markers left out)
                records[partition].append(_Record(offset, key, value, transaction[partition]))
                app.tables.persist_offset_on_commit(store, TP(changelog, partition), offset)
            elif op[0] == "commit":
                # The broker commits first; the stores follow (a crash in between is fine).
                committed.update((p, transaction[p]) for p in op[1])
                for p in op[1]:
                    transaction[p] += 1
                app.tables.on_commit({TP(SOURCE, p): 1 for p in op[1]})
            else:
                partition = op[1]
                transaction[partition] += 1  # aborted: its records are never read
                app.tables.on_revoked_after_commit({TP(SOURCE, partition)})
    except _Crash:
        pass
    finally:
        _current_event.reset(token)
    for partition in range(PARTITIONS):
        db = store.handles.open.pop(partition)
        db.db.close()
    for partition in range(PARTITIONS):
        data, offset = _on_disk(store.partition_path(partition))
        readable = [r for r in records[partition] if (partition, r.transaction) in committed]
        if offset is not None:
            assert offset in {r.offset for r in readable}, (partition, offset)
        expected: dict[bytes, bytes] = {}
        for record in readable:
            if offset is not None and record.offset <= offset:
                if record.value is None:
                    expected.pop(record.key, None)
                else:
                    expected[record.key] = record.value
        assert data == expected, (partition, offset, records[partition])
