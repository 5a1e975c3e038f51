"""A batch's table reads and writes look the partition, key index and sensors up once per batch,
and leave what the per-call store calls leave (`batch_table`).

A real rocksdict store in a temporary directory (streamapp's, `streamapp.runtime.stores`);
the app's own producer object, its aiokafka producer a stand-in that keeps what it is sent and
hands back futures the test resolves (no broker). "Faust's calls" is the same table with
`batch_table`'s path turned off: the store's ``get_bytes`` / ``set_bytes`` (Faust's rules of
which partition), the key index and the sensors per call, as before this path.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from aiokafka.structs import RecordMetadata, TopicPartition
from faust.exceptions import PartitionsMismatch
from faust.sensors import Sensor
from faust.stores.memory import Store as MemoryStore
from faust.streams import _current_event
from faust.types import TP

from streamapp import App
from streamapp.runtime.stores import STORE_URL, RocksDBStore
from streamapp.sending import batch_changelog
from streamapp.table_writes import batch_table

SOURCE = TP("source", 2)
CHANGELOG = "batch-table-test-counts-changelog"


class _AioProducer:
    """aiokafka's producer as the batch path uses it: ``send`` keeps and returns a future."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, int | None]] = []
        self.futures: list[asyncio.Future[Any]] = []

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: Any = None,
    ) -> asyncio.Future[Any]:
        self.sent.append((topic, key, value, partition))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


def _event_of(partition: int) -> Any:
    event = mock.Mock()
    event.message.partition = partition
    event.message.topic = SOURCE.topic
    return event


@pytest.fixture
def in_batch() -> Iterator[None]:
    """Code runs as a batch agent does: the current event is the batch's last record."""
    event = _event_of(SOURCE.partition)
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)
        batch_changelog.forget()


def _app(path: Path, name: str = "counts", **table_options: Any) -> tuple[Any, Any, _AioProducer]:
    """An app as a worker has it (Faust's monitor as its sensor), its table, its producer."""
    app = App("batch-table-test", datadir=str(path), topic_partitions=4)
    app.in_worker = True
    app.sensors.add(app.monitor)
    aio = _AioProducer()
    app.producer.client = aio
    app.producer.send_soon = mock.Mock(side_effect=AssertionError("Faust's buffered path"))
    app.maybe_start_producer = mock.AsyncMock(return_value=app.producer)
    table_options.setdefault("default", int)
    table = app.Table(name, partitions=4, **table_options)
    table._verify_source_topic_partitions = lambda topic: None
    return app, table, aio


def _faust_calls(table: Any) -> Any:
    """``table`` with batch_table's path off: Faust's store calls per read and write."""
    table._serialized_store()  # decides the path once; then turned off
    table._in_batches = False
    return table


def _work(table: Any) -> None:
    """Reads and writes of one batch, some reading what the batch wrote."""
    table["a"] += 1
    table["a"] += 1
    table["b"] = {"n": 1}
    assert table["b"] == {"n": 1}
    assert "b" in table
    del table["b"]
    assert "b" not in table and table["b"] == 0  # the default: gone from the store
    table["c"] = 3
    table["a"] += table["c"]


def _rows(store: Any, partition: int) -> list[tuple[bytes, bytes]]:
    return sorted(store.handle(partition).items())


async def test_a_batch_leaves_what_fausts_calls_leave(tmp_path: Path, in_batch: None) -> None:
    _, fast, fast_aio = _app(tmp_path / "fast")
    _, slow, slow_aio = _app(tmp_path / "slow")
    _faust_calls(slow)
    for table in (fast, slow):
        changelog = batch_changelog.begin(table.app, SOURCE)
        with mock.patch.object(table.data, "get_bytes", wraps=table.data.get_bytes) as get:
            _work(table)
        assert (get.call_count == 0) is (table is fast)  # the path taken
        await batch_changelog.end(changelog)
    # The changelog records (bytes, order, partition), the store, its key index, the counts.
    assert fast_aio.sent == slow_aio.sent
    # Each key's last write, in the order the keys were first written (batch_changelog).
    assert [value for _, _, value, _ in fast_aio.sent] == [b"5", None, b"3"]
    assert _rows(fast.data, 2) == _rows(slow.data, 2) == [(b'"a"', b"5"), (b'"c"', b"3")]
    assert list(fast.data.key_index.items()) == list(slow.data.key_index.items())
    assert list(fast.data.key_index.items()) == [(b'"a"', 2), (b'"b"', 2), (b'"c"', 2)]
    states = (fast.app.monitor.tables["counts"], slow.app.monitor.tables["counts"])
    assert [(s.keys_retrieved, s.keys_updated, s.keys_deleted) for s in states] == [(6, 5, 1)] * 2


async def test_reads_and_writes_go_to_the_batchs_partition_only(
    tmp_path: Path, in_batch: None
) -> None:
    app, counts, _ = _app(tmp_path)
    other = counts.data.handle(1)
    other.put(b'"a"', b"40")  # the same key in another partition's store
    changelog = batch_changelog.begin(app, SOURCE)
    assert counts["a"] == 0
    counts["a"] += 1
    await batch_changelog.end(changelog)
    assert _rows(counts.data, 2) == [(b'"a"', b"1")]
    assert other[b'"a"'] == b"40"


async def test_the_persisted_offset_follows_the_last_delivery(
    tmp_path: Path, in_batch: None
) -> None:
    app, counts, aio = _app(tmp_path)
    changelog = batch_changelog.begin(app, SOURCE)
    with mock.patch.object(RocksDBStore, "set_bytes", side_effect=AssertionError("per-call path")):
        counts["a"] += 1
        counts["b"] += 1
    await batch_changelog.end(changelog)
    store, tp = counts.data, TP(CHANGELOG, 2)
    assert store.persisted_offset(tp) is None
    for offset, fut in enumerate(aio.futures, start=20):
        fut.set_result(RecordMetadata(CHANGELOG, 2, TopicPartition(CHANGELOG, 2), offset, -1, 0, 0))
    await asyncio.sleep(0)
    assert store.persisted_offset(tp) == 21
    assert _rows(store, 2) == [(b'"a"', b"1"), (b'"b"', b"1"), (store.offset_key, b"21")]


async def test_a_deletion_finds_the_key_the_batch_wrote_in_the_index(
    tmp_path: Path, in_batch: None
) -> None:
    """A deletion in a batch deletes the key in the batch's partition, the one its changelog
    record goes to (and a recovery applies it in): another partition's key stays."""
    app, counts, _ = _app(tmp_path)
    other = counts.data.handle(1)
    other.put(b'"a"', b"40")
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] = 5
    del counts["a"]
    await batch_changelog.end(changelog)
    assert "a" not in counts and _rows(counts.data, 2) == []
    assert other[b'"a"'] == b"40"  # another partition's key, not deleted


async def test_an_unfinished_batch_still_indexes_its_keys(tmp_path: Path, in_batch: None) -> None:
    app, counts, _ = _app(tmp_path)
    batch_changelog.begin(app, SOURCE)
    counts["a"] = 1
    assert b'"a"' not in counts.data.key_index  # noted once per batch
    batch_changelog.forget()  # what batches() does for a batch its agent left
    assert counts.data.key_index[b'"a"'] == 2


async def test_batches_of_two_tasks_keep_their_partitions(tmp_path: Path, in_batch: None) -> None:
    app, counts, aio = _app(tmp_path)
    changelogs = {}

    async def batch_of(partition: int, steps: asyncio.Queue[None], done: asyncio.Event) -> None:
        _current_event.set(weakref.ref(event := _event_of(partition)))
        changelogs[partition] = batch_changelog.begin(app, TP(SOURCE.topic, partition))
        for _ in range(2):
            await steps.get()
            counts["a"] += 1
        await batch_changelog.end(changelogs[partition])
        done.set()
        del event

    queues = {p: asyncio.Queue[None]() for p in (1, 3)}
    finished = {p: asyncio.Event() for p in (1, 3)}
    tasks = [asyncio.ensure_future(batch_of(p, queues[p], finished[p])) for p in (1, 3)]
    for p in (1, 3, 3, 1):  # interleaved: each write finds the other task's batch last
        queues[p].put_nowait(None)
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert _rows(counts.data, 1) == [(b'"a"', b"2")] and _rows(counts.data, 3) == [(b'"a"', b"2")]
    # One record of the key per batch: its last value (batch_changelog).
    assert sorted((p, value) for _, _, value, p in aio.sent) == [(1, b"2"), (3, b"2")]


async def test_a_handle_closed_during_the_batch_is_opened_again(
    tmp_path: Path, in_batch: None
) -> None:
    """A rebalance may close a partition's store while the agent awaits inside a batch: the
    next write opens it again, as the store's per-call path does, and no closed handle is
    written."""
    app, counts, _ = _app(tmp_path)
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] += 1  # a read: the partition's handle is open
    store = counts.data
    store.revoke_partitions(counts, {TP(CHANGELOG, 2)})  # closed off the event loop
    assert 2 not in store.open_partitions()
    counts["a"] += 1
    await batch_changelog.end(changelog)
    assert _rows(store, 2) == [(b'"a"', b"2")]


class _Recording(Sensor):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any, Any]] = []

    def on_table_get(self, table: Any, key: Any) -> None:
        self.calls.append(("get", key, None))

    def on_table_set(self, table: Any, key: Any, value: Any) -> None:
        self.calls.append(("set", key, value))


async def test_sensors_that_are_not_fausts_monitor_are_called_per_read_and_write(
    tmp_path: Path, in_batch: None
) -> None:
    app, counts, _ = _app(tmp_path)
    recording = _Recording()
    app.sensors.add(recording)
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] += 1
    counts["a"] += 1
    assert recording.calls == [
        ("get", "a", None),
        ("set", "a", 1),
        ("get", "a", None),
        ("set", "a", 2),
    ]
    assert app.monitor.tables["counts"].keys_updated == 2
    await batch_changelog.end(changelog)


async def test_the_monitor_counts_at_every_moment(tmp_path: Path, in_batch: None) -> None:
    app, counts, _ = _app(tmp_path)
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] += 1  # the monitor has no state for the table yet: Faust's call makes it
    state = app.monitor.tables["counts"]
    assert (state.keys_retrieved, state.keys_updated) == (1, 1)
    await batch_changelog.end(changelog)
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] += 1
    assert (state.keys_retrieved, state.keys_updated) == (2, 2)  # counted per call, not at the end
    counts["b"] = 1
    assert (state.keys_retrieved, state.keys_updated) == (2, 3)
    await batch_changelog.end(changelog)
    assert batch_table.for_batch(counts, counts.data) is not None


async def test_other_tables_keep_fausts_calls(tmp_path: Path, in_batch: None) -> None:
    app, counts, aio = _app(tmp_path)
    windowed = app.Table("windowed", default=int, partitions=4).tumbling(10.0).relative_to_now()
    keyed = app.Table("keyed", default=int, partitions=4, use_partitioner=True)
    for table in (windowed.table, keyed):
        table._serialized_store()
        assert not table._in_batches, table.name
    changelog = batch_changelog.begin(app, SOURCE)
    store = windowed.table.data
    with mock.patch.object(store, "set_bytes", wraps=store.set_bytes) as set_:
        windowed["k"] += 1  # Faust's store calls (and the window's expiry noted)
    assert set_.call_count == 1 and windowed["k"].now() == 1
    assert len(windowed.table.window_expiry) == 1  # the window's expiry noted
    await batch_changelog.end(changelog)
    assert [topic for topic, *_ in aio.sent] == ["batch-table-test-windowed-changelog"]

    global_table = app.GlobalTable("global", default=int, partitions=4)
    assert not batch_table.handles_table(global_table, global_table.data)

    class OwnStore(RocksDBStore):
        def get_bytes(self, key: bytes) -> bytes | None:
            return super().get_bytes(key)

    own = app.Table("own", default=int, partitions=4)
    assert not batch_table.handles_table(own, OwnStore(STORE_URL, app, own))
    assert not batch_table.handles_table(counts, MemoryStore("memory://", app, counts))
    assert batch_table.handles_table(counts, counts.data)


async def test_outside_a_batch_fausts_calls(tmp_path: Path, in_batch: None) -> None:
    _, counts, _ = _app(tmp_path)
    counts.app.producer.send_soon = mock.Mock()
    with mock.patch.object(counts.data, "set_bytes", wraps=counts.data.set_bytes) as set_:
        counts["a"] = 1
    assert set_.call_count == 1
    assert counts.data.key_index[b'"a"'] == 2


async def test_only_a_write_checks_the_co_partitioning(tmp_path: Path, in_batch: None) -> None:
    """Faust checks that the source topic is co-partitioned with the changelog when a write
    asks for its partition (``partition_for_key``), not on a read: so does a batch."""
    app, counts, _ = _app(tmp_path)
    counts._verify_source_topic_partitions = mock.Mock(side_effect=PartitionsMismatch("source"))
    changelog = batch_changelog.begin(app, SOURCE)
    assert counts["a"] == 0
    with pytest.raises(PartitionsMismatch):
        counts["a"] = 1
    counts._verify_source_topic_partitions.assert_called_once_with(SOURCE.topic)
    batch_changelog.forget()
    assert changelog is not None and not changelog.records


def _stored(store: Any, partition: int, key: bytes) -> bytes | None:
    """What the partition's rocksdict store itself holds for ``key``."""
    value: bytes | None = store.handle(partition).get(key)
    return value


async def test_a_batchs_writes_are_stored_together_as_it_ends(
    tmp_path: Path, in_batch: None
) -> None:
    """The writes wait in the batch, read back from there, and reach the store in one rocksdict
    write batch at the batch's end, before its changelog records are sent."""
    app, counts, aio = _app(tmp_path)
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] += 1
    counts["a"] += 1
    counts["b"] = 7
    assert counts["a"] == 2 and counts["b"] == 7  # read back from the batch
    store = counts.data
    assert _stored(store, 2, b'"a"') is None and _stored(store, 2, b'"b"') is None
    writes = []
    real_flush = store.write_pending

    def flush() -> None:
        writes.append((dict(store.pending(2).writes), len(aio.sent)))
        real_flush()

    with mock.patch.object(store, "write_pending", flush):
        await batch_changelog.end(changelog)
    assert writes == [({b'"a"': b"2", b'"b"': b"7"}, 0)]  # one write, before any record is sent
    assert _rows(store, 2) == [(b'"a"', b"2"), (b'"b"', b"7")]
    assert len(aio.sent) == 2 and store.pending(2).writes == {}  # each key's last write


async def test_a_deletion_waits_with_the_batchs_writes(tmp_path: Path, in_batch: None) -> None:
    """A deletion in a batch goes to the store with the batch's writes, in the same write at its
    end; reads in the batch, and another task's, see the key gone meanwhile."""
    app, counts, aio = _app(tmp_path)
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"], counts["b"] = 1, 2
    await batch_changelog.end(changelog)
    store = counts.data
    changelog = batch_changelog.begin(app, SOURCE)
    del counts["a"]
    counts["c"] = 3
    del counts["c"]
    counts["c"] = 4
    assert "a" not in counts and counts["a"] == 0 and "c" in counts and counts["c"] == 4
    assert _rows(store, 2) == [(b'"a"', b"1"), (b'"b"', b"2")]  # nothing stored yet
    writes = []
    real_flush = store.write_pending

    def flush() -> None:
        writes.append(dict(store.pending(2).writes))
        real_flush()

    with mock.patch.object(store, "write_pending", flush):
        await batch_changelog.end(changelog)
    assert writes == [{b'"a"': None, b'"c"': b"4"}]  # one write
    assert _rows(store, 2) == [(b'"b"', b"2"), (b'"c"', b"4")]
    assert [(key, value) for _, key, value, _ in aio.sent[2:]] == [(b'"a"', None), (b'"c"', b"4")]
    assert app.monitor.tables["counts"].keys_deleted == 2

    changelog = batch_changelog.begin(app, SOURCE)
    del counts["b"]

    async def elsewhere() -> bool:
        return "b" in counts  # no batch, no event: Faust's path, the deletion stored first

    assert await _in_another_task(elsewhere()) is False
    assert _rows(store, 2) == [(b'"c"', b"4")]
    await batch_changelog.end(changelog)


async def test_an_unfinished_batchs_deletion_is_not_stored(tmp_path: Path, in_batch: None) -> None:
    app, counts, aio = _app(tmp_path)
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] = 1
    await batch_changelog.end(changelog)
    batch_changelog.begin(app, SOURCE)
    del counts["a"]
    batch_changelog.forget()
    assert _rows(counts.data, 2) == [(b'"a"', b"1")] and counts["a"] == 1
    assert len(aio.sent) == 1


async def test_an_unfinished_batchs_writes_are_not_stored(tmp_path: Path, in_batch: None) -> None:
    """A batch its agent leaves sends no changelog record: its writes stay out of the store
    too, which keeps claiming only what the changelog holds."""
    app, counts, aio = _app(tmp_path)
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] = 1
    await batch_changelog.end(changelog)
    batch_changelog.begin(app, SOURCE)
    counts["a"] += 5
    counts["b"] = 1
    batch_changelog.forget()
    assert _rows(counts.data, 2) == [(b'"a"', b"1")]
    assert counts["a"] == 1 and counts["b"] == 0
    assert len(aio.sent) == 1


async def test_reads_of_the_whole_table_see_the_batchs_writes(
    tmp_path: Path, in_batch: None
) -> None:
    """Membership, iteration, length and Faust's own reads go to the store: the batch's writes
    are stored before them."""
    app, counts, _ = _app(tmp_path)
    reads: list[tuple[str, Any]] = [
        ("in", lambda: "a" in counts),
        ("keys", lambda: list(counts.keys())),
        ("items", lambda: list(counts.items())),
        ("values", lambda: list(counts.values())),
        ("len", lambda: len(counts)),
        ("copy", lambda: counts.copy()),
    ]
    seen = {}
    actives = {TP(CHANGELOG, SOURCE.partition)}  # Faust's iteration: active partitions only
    with mock.patch.object(app.assignor, "assigned_actives", return_value=actives):
        for name, read in reads:
            await _one_read(app, counts, name, read, seen)
    assert seen == {
        "in": True,
        "keys": ["a"],
        "items": [("a", 1)],
        "values": [1],
        "len": 1,
        "copy": {"a": 1},
    }


async def _one_read(app: Any, counts: Any, name: str, read: Any, seen: dict[str, Any]) -> None:
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] += 1
    seen[name] = read()
    await batch_changelog.end(changelog)
    counts.data.handle(2).delete(b'"a"')  # the next read starts afresh


def _in_another_task(coro: Any) -> asyncio.Task[Any]:
    """``coro`` in a task of its own context, as a web view's or a timer's: no batch, no event."""
    return asyncio.get_running_loop().create_task(coro, context=contextvars.Context())


async def test_another_tasks_read_sees_the_batchs_writes(tmp_path: Path, in_batch: None) -> None:
    """A read made while the agent awaits inside a batch (a web view, a timer: no current event,
    Faust's path) finds what the batch wrote so far; so does another batch of the partition."""
    app, counts, _ = _app(tmp_path)
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] = 3

    async def elsewhere() -> tuple[int, int]:
        outside = counts["a"]
        _current_event.set(weakref.ref(event := _event_of(SOURCE.partition)))
        other = batch_changelog.begin(app, SOURCE)
        counts["a"] += 1  # another batch of the same partition
        await batch_changelog.end(other)
        del event
        return outside, counts["a"]

    assert await _in_another_task(elsewhere()) == (3, 4)
    assert counts["a"] == 4
    await batch_changelog.end(changelog)
    assert _rows(counts.data, 2) == [(b'"a"', b"4")]


async def test_a_write_outside_the_batch_path_comes_after_the_batchs(
    tmp_path: Path, in_batch: None
) -> None:
    """Faust's own write of a key the batch wrote (another agent's, one record at a time, while
    the batch's agent awaits) stores the batch's writes first: the later write is kept."""
    app, counts, _ = _app(tmp_path)
    app.producer.send_soon = mock.Mock()
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] = 1

    async def elsewhere() -> None:
        # Another agent of the partition, one record at a time.
        _current_event.set(weakref.ref(event := _event_of(SOURCE.partition)))
        counts["a"] = 9
        del event

    await _in_another_task(elsewhere())
    await batch_changelog.end(changelog)
    assert _rows(counts.data, 2) == [(b'"a"', b"9")]
