"""Tables of sets on RocksDB: the store holds each set as it is after its last operation, a replay
writes the sets it covers before their offset, and a completed recovery loads what it recovered
without touching the partitions that stayed (`streamapp.set_tables`).

A real rocksdict store in a temporary directory; the changelog producer is a stand-in that
keeps what the table sends (no broker: nothing here is Kafka behaviour).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from faust.streams import _current_event
from faust.tables.sets import OPERATION_ADD, OPERATION_DISCARD, OPERATION_UPDATE
from faust.types import TP

from streamapp import App
from streamapp.set_tables import StoredSets, apply_operation

CHANGELOG = "set-tables-test-people-changelog"


class _Worker:
    """A streamapp app with one table of sets, as a worker holds it: its changelog sends kept,
    its active partitions set by the test."""

    def __init__(self, path: Path, *, store: str | None = None, global_: bool = False) -> None:
        options = {} if store is None else {"store": store}
        self.app = App("set-tables-test", datadir=str(path), topic_partitions=4, **options)
        make = self.app.SetGlobalTable if global_ else self.app.SetTable
        self.table = make("people", partitions=4)
        self.sent: list[tuple[int | None, Any, Any]] = []
        self.table.send_changelog = lambda partition, key, value, *a, **kw: self.sent.append(
            (partition, key, value)
        )
        self.actives: set[TP] = set()
        assignor = mock.Mock()
        assignor.assigned_actives = lambda: set(self.actives)
        self.app.__dict__["assignor"] = assignor

    @property
    def sets(self) -> StoredSets:
        data = self.table.data
        assert isinstance(data, StoredSets)
        return data

    def stored(self, partition: int) -> dict[Any, set[Any]]:
        return dict(self.sets.stored_sets(partition))

    def persisted(self, partition: int) -> int | None:
        offset = self.table.persisted_offset(TP(CHANGELOG, partition))
        return None if offset is None else int(offset)


@pytest.fixture
def worker(tmp_path: Path) -> _Worker:
    return _Worker(tmp_path)


@pytest.fixture
def in_partition() -> Iterator[Any]:
    """Run code as an agent processing a record of the given source partition."""
    events: list[Any] = []  # referenced: the context holds them weakly

    def enter(partition: int) -> None:
        event = mock.Mock()
        event.message.partition = partition
        event.message.topic = "joins"
        events.append(event)
        _current_event.set(weakref.ref(event))

    yield enter
    # An async test's context is its own; a plain test's is cleared here for the next.
    _current_event.set(None)


def _record(partition: int, offset: int, operation: int, key: str, value: Any) -> Any:
    """A changelog record as recovery hands it to the table."""
    return SimpleNamespace(
        key=[operation, key],
        value=value,
        message=SimpleNamespace(tp=TP(CHANGELOG, partition), offset=offset),
    )


def test_the_store_holds_each_set_as_it_is_after_its_operation(
    worker: _Worker, in_partition: Any
) -> None:
    in_partition(1)
    worker.table["loc_00"].add("person_054")
    assert worker.stored(1) == {"loc_00": {"person_054"}}
    worker.table["loc_00"].add("person_007")
    worker.table["loc_00"].discard("person_054")
    assert worker.stored(1) == {"loc_00": {"person_007"}}
    assert set(worker.table["loc_00"]) == {"person_007"}
    assert worker.sent == [
        (1, (OPERATION_ADD, "loc_00"), "person_054"),
        (1, (OPERATION_ADD, "loc_00"), "person_007"),
        (1, (OPERATION_DISCARD, "loc_00"), "person_054"),
    ]


def test_updates_store_the_set_after_them(worker: _Worker, in_partition: Any) -> None:
    in_partition(2)
    worker.table["k"].update({"a", "b", "c"})
    worker.table["k"].difference_update({"a"})
    worker.table["k"].intersection_update({"b", "z"})
    assert worker.stored(2) == {"k": {"b"}}
    worker.table["k"].clear()
    assert worker.stored(2) == {"k": set()}


def test_an_operation_that_changes_nothing_in_memory_still_reaches_the_changelog(
    worker: _Worker, in_partition: Any
) -> None:
    """After a crash the store may hold an operation whose changelog record was never sent;
    the input record is processed again and must send it this time."""
    in_partition(0)
    worker.table["k"].add("x")
    worker.table["k"].add("x")
    worker.table["k"].discard("y")
    worker.table["k"].update({"x"})
    worker.table["k"].difference_update({"y"})
    assert [op for _, (op, _), _ in worker.sent] == [
        OPERATION_ADD,
        OPERATION_ADD,
        OPERATION_DISCARD,
        OPERATION_UPDATE,
        OPERATION_UPDATE,
    ]
    assert worker.stored(0) == {"k": {"x"}}


def test_an_operation_outside_a_stream_raises_and_changes_nothing(worker: _Worker) -> None:
    with pytest.raises(RuntimeError, match="outside of agent/stream"):
        worker.table["k"].add("x")
    assert set(worker.table["k"]) == set()
    assert worker.sent == []


def test_a_replay_writes_the_sets_it_covers_before_their_offset(worker: _Worker) -> None:
    worker.table.apply_changelog_batch(
        [
            _record(3, 10, OPERATION_ADD, "loc_01", "p1"),
            _record(3, 11, OPERATION_ADD, "loc_01", "p2"),
            _record(3, 12, OPERATION_UPDATE, "loc_02", [["p3", "p4"], []]),
        ]
    )
    assert worker.stored(3) == {"loc_01": {"p1", "p2"}, "loc_02": {"p3", "p4"}}
    assert worker.persisted(3) == 12
    worker.table.apply_changelog_batch(
        [
            _record(3, 13, OPERATION_DISCARD, "loc_01", "p1"),
            _record(3, 14, OPERATION_UPDATE, "loc_02", [[], ["p4"]]),
        ]
    )
    assert worker.stored(3) == {"loc_01": {"p2"}, "loc_02": {"p3"}}
    assert worker.persisted(3) == 14


def test_a_replicas_replay_leaves_memory_alone(worker: _Worker) -> None:
    """A standby's partition is not active here: its sets are stored, not served."""
    worker.table.apply_changelog_batch([_record(1, 0, OPERATION_ADD, "loc_00", "p1")])
    assert "loc_00" not in worker.sets.data
    assert worker.stored(1) == {"loc_00": {"p1"}}


async def test_a_completed_recovery_loads_what_it_recovered_and_keeps_what_stayed(
    worker: _Worker, in_partition: Any
) -> None:
    worker.actives = {TP(CHANGELOG, 0)}
    await worker.sets.on_recovery_completed({TP(CHANGELOG, 0)}, set())
    in_partition(0)
    kept = worker.table["loc_kept"]
    kept.add("p0")
    # Partition 1 was a standby here; a rebalance makes it active and recovery completes with
    # it alone (partition 0 was not in recovery: it stayed active and keeps being processed).
    worker.table.apply_changelog_batch([_record(1, 5, OPERATION_ADD, "loc_gained", "p1")])
    worker.actives = {TP(CHANGELOG, 0), TP(CHANGELOG, 1)}
    await worker.sets.on_recovery_completed({TP(CHANGELOG, 1)}, set())
    assert worker.table["loc_kept"] is kept
    assert set(worker.table["loc_kept"]) == {"p0"}
    assert set(worker.table["loc_gained"]) == {"p1"}
    assert worker.sets.loaded == {0, 1}


async def test_a_partition_no_longer_active_leaves_memory(
    worker: _Worker, in_partition: Any
) -> None:
    worker.actives = {TP(CHANGELOG, 0), TP(CHANGELOG, 1)}
    await worker.sets.on_recovery_completed(set(worker.actives), set())
    in_partition(1)
    worker.table["loc_moved"].add("p1")
    worker.actives = {TP(CHANGELOG, 0)}  # partition 1 is now a standby here
    await worker.sets.on_recovery_completed(set(), {TP(CHANGELOG, 1)})
    assert "loc_moved" not in worker.sets.data
    assert worker.stored(1) == {"loc_moved": {"p1"}}  # kept on disk, as a standby's


async def test_a_restarted_worker_finds_each_set_as_it_left_it(
    tmp_path: Path, in_partition: Any
) -> None:
    first = _Worker(tmp_path)
    in_partition(2)
    first.table["loc_00"].add("person_054")
    first.table["loc_00"].add("person_055")
    first.table["loc_00"].discard("person_055")
    first.table.apply_changelog_batch([_record(2, 0, OPERATION_ADD, "loc_00", "person_054")])
    assert first.sets.rocksdb is not None
    await first.sets.rocksdb.stop()  # closes its handles, as a stopping worker does
    second = _Worker(tmp_path)
    second.actives = {TP(CHANGELOG, 2)}
    await second.sets.on_recovery_completed({TP(CHANGELOG, 2)}, set())
    assert set(second.table["loc_00"]) == {"person_054"}
    assert second.persisted(2) == 0


async def test_a_global_table_of_sets_is_global_and_serves_what_it_replays(tmp_path: Path) -> None:
    worker = _Worker(tmp_path, global_=True)
    assert worker.table.is_global
    await worker.sets.on_recovery_completed({TP(worker.sets.changelog_topic, 0)}, set())
    record = _record(0, 3, OPERATION_ADD, "k", "from another worker")
    record.message.tp = TP(worker.sets.changelog_topic, 0)
    worker.table.apply_changelog_batch([record])
    assert set(worker.table["k"]) == {"from another worker"}


def test_a_memory_store_keeps_fausts_behaviour(tmp_path: Path, in_partition: Any) -> None:
    worker = _Worker(tmp_path, store="memory://")
    assert worker.sets.rocksdb is None
    in_partition(0)
    worker.table["k"].add("x")
    worker.table.apply_changelog_batch([_record(0, 0, OPERATION_ADD, "j", "y")])
    assert set(worker.table["j"]) == {"y"}
    assert set(worker.table["k"]) == {"x"}


@pytest.mark.parametrize(
    ("operation", "value", "expected"),
    [
        (OPERATION_ADD, "c", {"a", "b", "c"}),
        (OPERATION_DISCARD, "a", {"b"}),
        (OPERATION_DISCARD, "z", {"a", "b"}),
        (OPERATION_UPDATE, [["c"], ["a"]], {"b", "c"}),
    ],
)
def test_apply_operation(operation: int, value: Any, expected: set[str]) -> None:
    members = {"a", "b"}
    apply_operation(members, operation, value)
    assert members == expected


def test_an_unknown_operation_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown set operation 7"):
        apply_operation(set(), 7, "x")
