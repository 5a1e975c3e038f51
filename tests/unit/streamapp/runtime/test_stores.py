"""streamapp's RocksDB store (`streamapp.runtime.stores`): loaded through Faust's ``faust.stores``
entry point, beside Faust's own store left as it is; Faust's layout on disk; a partition's data
and its persisted offset in one write batch; Faust's mapping rules. Real rocksdict stores in a
temporary directory, no broker."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import faust
import pytest
import rocksdict
from faust.stores.memory import Store as MemoryStore
from faust.stores.rocksdb import Store as FaustRocksDBStore
from faust.streams import _current_event
from faust.types import TP

import streamapp
from streamapp.runtime.pending_writes import OFFSET_KEY
from streamapp.runtime.stores import STORE_SCHEME, RocksDBStore

# -- Faust's own store, in the same process, stays as Faust wrote it --


def _faust_attributes() -> dict[tuple[str, str], object]:
    """Every class attribute of Faust's RocksDB store and of its Faust and mode bases."""
    return {
        (f"{cls.__module__}:{cls.__qualname__}", name): value
        for cls in FaustRocksDBStore.__mro__
        if cls.__module__.split(".")[0] in ("faust", "mode")
        for name, value in vars(cls).items()
    }


async def test_a_plain_faust_app_beside_a_streamapp_app_gets_fausts_own_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _faust_attributes()
    ours = streamapp.App("ours", datadir=str(tmp_path / "ours"))
    ours_table = ours.Table("counts", partitions=2)
    theirs = faust.App("theirs", store="rocksdb://", datadir=str(tmp_path / "theirs"))
    theirs_table = theirs.Table("counts", partitions=2)
    changelog = TP("ours-counts-changelog", 1)

    # streamapp's store through all it does: writes, offsets, a revocation, a rebalance.
    store = ours_table.data
    assert type(store) is RocksDBStore and not isinstance(store, FaustRocksDBStore)
    store.write(1, {b"k": b"v"}, offset=3)
    store.revoke_partitions(ours_table, {changelog})
    await store.on_rebalance(set(), set(), set())
    assert store.persisted_offset(changelog) == 3

    # Faust's: its own class, every method its own, doing what stock Faust does (a full
    # garbage collection at each revocation, which streamapp's store does not run).
    assert type(theirs_table.data) is FaustRocksDBStore
    theirs_table.data.set_persisted_offset(TP("theirs-counts-changelog", 0), 7)
    assert theirs_table.data.persisted_offset(TP("theirs-counts-changelog", 0)) == 7
    collected: list[int] = []
    real_collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(1) or real_collect(*a))
    theirs_table.data.revoke_partitions(theirs_table, {TP("theirs-counts-changelog", 0)})
    store.revoke_partitions(ours_table, {changelog})
    assert collected == [1]

    after = _faust_attributes()
    assert after.keys() == before.keys()
    assert [key for key, value in after.items() if before[key] is not value] == []
    # Each method is the one its class's own module defines: none came from elsewhere.
    replaced = [
        (owner, name)
        for (owner, name), value in after.items()
        if callable(value) and getattr(value, "__module__", None) not in (None, owner.split(":")[0])
    ]
    assert replaced == []


def test_streamapp_apps_and_tables_take_rocksdb_as_streamapps_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = streamapp.App("urls", datadir=str(tmp_path))
    assert app.conf.store.scheme == STORE_SCHEME
    assert type(app.Table("default").data) is RocksDBStore
    assert type(app.Table("given", store="rocksdb://").data) is RocksDBStore
    assert type(app.GlobalTable("global", store="rocksdb://").data) is RocksDBStore
    assert type(app.SetTable("sets").data.storage) is RocksDBStore
    given = streamapp.App("urls-given", store="rocksdb://", datadir=str(tmp_path))
    assert type(given.Table("t").data) is RocksDBStore
    in_memory = streamapp.App("urls-memory", store="memory://", datadir=str(tmp_path))
    assert type(in_memory.Table("t").data) is MemoryStore
    assert type(in_memory.Table("on-disk", store="rocksdb://").data) is RocksDBStore
    # Faust's APP_STORE variable wins over what the App is given: it is taken the same way.
    monkeypatch.setenv("APP_STORE", "rocksdb://")
    from_env = streamapp.App("urls-env", store="memory://", datadir=str(tmp_path))
    assert type(from_env.Table("t").data) is RocksDBStore


def test_a_table_option_for_another_driver_is_refused_in_one_line(tmp_path: Path) -> None:
    app = streamapp.App("driver", datadir=str(tmp_path))
    table = app.Table("counts", options={"driver": "python-rocksdb"})
    with pytest.raises(faust.exceptions.ImproperlyConfigured) as refused:
        table.data  # noqa: B018
    assert str(refused.value) == (
        "table counts: streamapp's RocksDB store runs on rocksdict, not 'python-rocksdb': "
        "remove the table's 'driver' option"
    )


# -- Faust's layout on disk: either store opens what the other wrote --


def test_a_data_dir_written_by_fausts_store_opens_unchanged_and_back(tmp_path: Path) -> None:
    changelog = TP("layout-counts-changelog", 2)
    theirs = faust.App("layout", store="rocksdb://", datadir=str(tmp_path)).Table("counts")
    faust_store = theirs.data
    faust_store.set_persisted_offset(changelog, 41)
    faust_store._db_for_partition(2).put(b'"a"', b"1")
    faust_path = faust_store.partition_path(2)
    faust_store._dbs.clear()  # Faust's revocation: the handle dropped, closed as it goes
    gc.collect()

    ours = streamapp.App("layout", datadir=str(tmp_path)).Table("counts").data
    assert ours.partition_path(2) == faust_path
    assert ours.persisted_offset(changelog) == 41
    assert list(ours.items_of(2)) == [(b'"a"', b"1")]
    ours.write(2, {b'"a"': b"2", b'"b"': b"3"}, offset=43)
    ours.close_partition(2)

    again = faust.App("layout", store="rocksdb://", datadir=str(tmp_path)).Table("counts").data
    assert again.persisted_offset(changelog) == 43
    assert sorted(again._db_for_partition(2).items()) == [
        (b'"a"', b"2"),
        (b'"b"', b"3"),
        (OFFSET_KEY, b"43"),
    ]


# -- A partition's data and its persisted offset: one write batch --


class _Crash(Exception):
    """The process dies here: this write, and every one after it, never reaches the disk."""


class _CrashingHandle:
    """A partition's rocksdict handle whose writes (puts, deletes, write batches) each spend
    one of the writes ``left``; the first one past them crashes."""

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
class _Message:
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes | None

    @property
    def tp(self) -> TP:
        return TP(self.topic, self.partition)


@dataclass
class _Event:
    message: _Message
    key: Any = None
    value: Any = None
    headers: dict[str, Any] = field(default_factory=dict)


TOPIC = "crash-counts-changelog"
#: Changelog records of two partitions, offset order within each (None: a deletion).
RECORDS = [
    (0, 10, b'"a"', b"2"),
    (1, 20, b'"x"', b"9"),
    (0, 11, b'"b"', b"1"),
    (0, 12, b'"old"', None),
    (1, 21, b'"x"', b"10"),
    (0, 13, b'"a"', b"3"),
]
#: What each partition holds before the replay, up to its offset.
BEFORE = {0: ({b'"old"': b"5"}, 9), 1: ({b'"y"': b"1"}, 19)}


def _state_at(partition: int, offset: int) -> dict[bytes, bytes]:
    """What the partition holds once its changelog is applied up to ``offset``."""
    data, start = BEFORE[partition]
    state = dict(data)
    for p, record_offset, key, value in RECORDS:
        if p == partition and start < record_offset <= offset:
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
    return state


def _on_disk(path: Path) -> tuple[dict[bytes, bytes], int | None]:
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


def _replay(datadir: Path, writes_left: int) -> tuple[Any, bool]:
    """A table's replay of `RECORDS`, the process dying after ``writes_left`` writes (or not at
    all); returns the store, all handles closed, and whether it crashed."""
    table = streamapp.App("crash", datadir=str(datadir)).Table("counts", partitions=2)
    store = table.data
    for partition, (data, offset) in BEFORE.items():
        store.write(partition, data, offset=offset)
    left = [writes_left]
    for partition in BEFORE:
        store.handles.open[partition] = _CrashingHandle(store.handle(partition), left)
    events = [_Event(_Message(TOPIC, p, o, k, v)) for p, o, k, v in RECORDS]
    crashed = False
    try:
        table.apply_changelog_batch(events)
    except _Crash:
        crashed = True
    store.handles.close_all()
    return store, crashed


def test_a_replay_stores_each_partitions_records_and_offset_in_one_write(tmp_path: Path) -> None:
    store, crashed = _replay(tmp_path / "whole", writes_left=1_000)
    assert not crashed
    for partition, end in ((0, 13), (1, 21)):
        assert _on_disk(store.partition_path(partition)) == (_state_at(partition, end), end)
    # Two partitions, two writes: one write batch each, its offset in it.
    _, crashed = _replay(tmp_path / "two", writes_left=2)
    assert not crashed


@pytest.mark.parametrize("writes_left", [0, 1])
def test_a_crash_at_any_write_leaves_each_partition_at_its_offset(
    tmp_path: Path, writes_left: int
) -> None:
    """Whatever write the process dies at, each partition holds exactly what its changelog
    holds up to the offset it claims: never an offset ahead of its data (nor behind it)."""
    store, crashed = _replay(tmp_path, writes_left)
    assert crashed
    for partition in BEFORE:
        data, offset = _on_disk(store.partition_path(partition))
        assert offset is not None
        assert data == _state_at(partition, offset), partition


def test_pending_writes_are_read_and_stored_in_one_write_with_the_offset(tmp_path: Path) -> None:
    store = streamapp.App("pending", datadir=str(tmp_path)).Table("counts").data
    store.write(3, {b"gone": b"1", b"kept": b"2"})
    pending = store.pending(3)
    pending.stage(b"new", b"3")
    pending.stage(b"gone", None)
    assert pending.lookup(b"gone") == (True, None) and pending.lookup(b"kept") == (False, None)
    assert store.read(3, b"new") == b"3" and store.read(3, b"gone") is None
    assert sorted(store.items_of(3)) == [(b"kept", b"2"), (b"new", b"3")]
    assert store.handle(3).get(b"new") is None  # not stored yet
    left = [1]
    store.handles.open[3] = _CrashingHandle(store.handle(3), left)
    store.write(3, pending.writes, offset=17)  # a transaction's writes, once committed
    pending.drop()
    assert left == [0]  # one write
    assert store.pending(3) is pending and len(pending) == 0  # the same, for the store's life
    store.handles.close_all()
    assert _on_disk(store.partition_path(3)) == ({b"kept": b"2", b"new": b"3"}, 17)


# -- Faust's mapping rules --


@pytest.fixture
def in_partition() -> Iterator[Any]:
    """Runs code as an agent does, on a record of the partition the test sets."""

    @dataclass
    class Message:
        partition: int
        topic: str = "source"

    @dataclass
    class Event:
        message: Message

    events: list[Any] = []

    def enter(partition: int) -> None:
        events.append(Event(Message(partition)))
        _current_event.set(weakref.ref(events[-1]))  # type: ignore[arg-type]

    token = _current_event.set(None)
    try:
        yield enter
    finally:
        _current_event.reset(token)


def test_in_a_stream_the_current_events_partition_else_where_the_key_is(
    tmp_path: Path, in_partition: Any
) -> None:
    app = streamapp.App("mapping", datadir=str(tmp_path))
    table = app.Table("counts", partitions=4)
    store = table.data
    in_partition(1)
    store["a"] = 1
    in_partition(2)
    store["a"] = 2
    assert store["a"] == 2 and "b" not in store
    assert store.handle(1).get(b'"a"') == b"1" and store.handle(2).get(b'"a"') == b"2"
    _current_event.set(None)  # a web view or a timer: no event
    assert store.key_index[b'"a"'] == 2
    assert store["a"] == 2  # the partition the index names
    store.key_index.clear()
    assert store["a"] in (1, 2) and "a" in store  # found in an open partition
    store.key_index.clear()
    del store["a"]  # not indexed: deleted in every open partition
    assert "a" not in store and store.get("a") is None
    assert store.handle(1).get(b'"a"') is None and store.handle(2).get(b'"a"') is None
    in_partition(3)
    store.update({"x": 1, "y": 2})
    actives = {TP(table.changelog_topic.get_topic_name(), 3)}
    with mock.patch.object(app.assignor, "assigned_actives", return_value=actives):
        assert store.copy() == {"x": 1, "y": 2} and len(store) == 2
        assert sorted(store) == ["x", "y"] and sorted(store.values()) == [1, 2]
