"""streamapp's RocksDB store revokes partitions without a full garbage collection, closing their
handles off the event loop (a real store on disk, no broker; see
`streamapp.runtime.store_handles`)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faust.types import TP

import streamapp
from streamapp.runtime import store_handles


@pytest.fixture
def table(tmp_path: Path) -> Any:
    app = streamapp.App("revoke-test", datadir=str(tmp_path))
    return app.Table("counts", partitions=4)


@pytest.fixture
def collections(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every full collection asked for (``gc.collect()``), counted; the automatic collector
    is off meanwhile, so that only an explicit collection frees a reference cycle."""
    asked: list[int] = []
    collect = gc.collect

    def counting(generation: int = 2) -> int:
        asked.append(generation)
        return collect(generation)

    monkeypatch.setattr(gc, "collect", counting)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield asked
    finally:
        if was_enabled:
            gc.enable()


def _changelog(table: Any, partition: int) -> TP:
    return TP(table.changelog_topic.get_topic_name(), partition)


def _write(table: Any, partition: int, offset: int) -> None:
    table.data.write(partition, {b"k": b"v"}, offset=offset)


def test_a_rebalance_that_revokes_nothing_collects_nothing(
    table: Any, collections: list[int]
) -> None:
    _write(table, 1, offset=5)
    table.data.revoke_partitions(table, set())
    table.data.revoke_partitions(table, {TP("source", 1), _changelog(table, 3)})  # none open
    assert collections == []
    assert table.data.open_partitions() == {1}


async def test_the_rebalance_step_closes_revoked_stores_off_the_event_loop(
    table: Any, collections: list[int]
) -> None:
    _write(table, 1, offset=5)
    _write(table, 2, offset=9)
    closed_on: list[str] = []

    class Handle:
        def __init__(self, db: Any) -> None:
            self.db = db

        def close(self) -> None:
            closed_on.append(threading.current_thread().name)
            self.db.close()

    handles = table.data.handles.open
    handles[2] = Handle(handles[2])
    await table.data.on_rebalance({_changelog(table, 1)}, {_changelog(table, 2)}, set())
    assert closed_on and closed_on[0] != threading.current_thread().name
    assert collections == []
    assert table.data.open_partitions() == {1}
    assert table.data.pending_close(2) is None
    # Opened again (a standby of it, or the partition given back): its lock was released.
    assert table.data.persisted_offset(_changelog(table, 2)) == 9
    assert collections == []


def test_an_open_during_the_close_of_its_store_waits_for_it(
    table: Any, collections: list[int]
) -> None:
    _write(table, 2, offset=9)
    gate = threading.Event()
    store_handles.closer.submit(gate.wait)  # holds the closer: the close below waits
    try:
        table.data.revoke_partitions(table, {_changelog(table, 2)})
        assert table.data.pending_close(2) is not None
        opening = threading.Event()
        opened: list[int | None] = []

        def reopen() -> None:
            opening.set()
            opened.append(table.data.persisted_offset(_changelog(table, 2)))

        reader = threading.Thread(target=reopen)
        reader.start()
        opening.wait()
    finally:
        gate.set()
    reader.join()
    assert opened == [9]
    assert collections == []


def _kept_by_a_cycle(table: Any, partition: int) -> None:
    """The partition's database kept open (and locked) by what only the collector can free: an
    iterator keeps its database open after the handle's close, and a cycle keeps the iterator."""
    items = iter(table.data.handle(partition).items())
    next(items)
    cycle: list[Any] = [items]
    cycle.append(cycle)


def test_a_handle_a_cycle_keeps_alive_is_collected_when_its_store_opens_again(
    table: Any, collections: list[int]
) -> None:
    _write(table, 2, offset=9)
    _kept_by_a_cycle(table, 2)
    table.data.revoke_partitions(table, {_changelog(table, 2)})
    assert collections == []
    assert table.data.persisted_offset(_changelog(table, 2)) == 9
    assert collections == [2]


def test_other_open_errors_are_raised_as_they_were(
    table: Any, collections: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise Exception("Corruption: CURRENT file corrupted")

    monkeypatch.setattr("streamapp.runtime.stores.Rdict", broken)
    with pytest.raises(Exception, match="Corruption"):
        table.data.handle(0)
    assert collections == []


def test_a_handle_in_a_cycle_frozen_at_startup_is_collected_too(
    table: Any, collections: list[int]
) -> None:
    _write(table, 2, offset=9)
    _kept_by_a_cycle(table, 2)
    # The worker froze its heap once started (streamapp.startup_heap): a plain collection
    # would not see the cycle, and the store could never open again.
    gc.freeze()
    try:
        table.data.revoke_partitions(table, {_changelog(table, 2)})
        assert table.data.persisted_offset(_changelog(table, 2)) == 9
        assert collections == [2]
    finally:
        gc.unfreeze()
