"""The offsets of the stores a worker has open, noted as they are opened and written (a real
store on disk, no broker; see `streamapp.runtime.store_handles`)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faust.types import TP

import streamapp
from streamapp.runtime.stores import open_offsets, store_of
from tables.inventory import LocalStateInventory, read_persisted_offset


@pytest.fixture
def table(tmp_path: Path) -> Any:
    app = streamapp.App("offsets-test", datadir=str(tmp_path))
    return app.Table("counts", partitions=4)


@pytest.fixture
def no_collector() -> Iterator[None]:
    """Only an explicit collection frees a reference cycle meanwhile."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _changelog(table: Any, partition: int) -> TP:
    return TP(table.changelog_topic.get_topic_name(), partition)


def _inventory(table: Any) -> LocalStateInventory:
    return LocalStateInventory(
        Path(table.app.conf.tabledir), {table.name: table.changelog_topic.get_topic_name()}
    )


def test_an_open_store_reports_what_was_last_written_to_it(table: Any) -> None:
    store = table.data
    store.handle(0)  # opened, nothing applied yet
    store.set_persisted_offset(_changelog(table, 1), 41)
    assert open_offsets([table]) == {("counts", 0): None, ("counts", 1): 41}
    store.set_persisted_offset(_changelog(table, 1), 57)
    assert open_offsets([table]) == {("counts", 0): None, ("counts", 1): 57}
    store.write(2, {b"k": b"v"}, offset=60)  # data and offset in one write batch
    assert open_offsets([table]) == {("counts", 0): None, ("counts", 1): 57, ("counts", 2): 60}
    # What a read-only open of the store finds, beside the open handle.
    assert read_persisted_offset(store.partition_path(1)) == 57
    assert read_persisted_offset(store.partition_path(2)) == 60


def test_a_store_opened_again_reports_what_it_holds_on_disk(table: Any) -> None:
    store = table.data
    store.set_persisted_offset(_changelog(table, 2), 9)
    store.revoke_partitions(table, {_changelog(table, 2)})
    assert open_offsets([table]) == {}  # closed: the inventory reads its disk
    assert store.persisted_offset(_changelog(table, 2)) == 9  # opens it again
    assert open_offsets([table]) == {("counts", 2): 9}


def test_the_offset_noted_goes_with_its_handle(table: Any) -> None:
    store = table.data
    store.set_persisted_offset(_changelog(table, 3), 5)
    store.close_partition(3)  # closed and forgotten (a damaged store set aside)
    assert open_offsets([table]) == {}
    store.handle(3)  # opened again: the offset it holds, read as it opens
    assert open_offsets([table]) == {("counts", 3): 5}


async def test_the_offsets_noted_keep_no_handle_open(table: Any, no_collector: None) -> None:
    # A stopped store closes its handles: the next open finds the store unlocked.
    store = table.data
    store.set_persisted_offset(_changelog(table, 1), 3)
    await store.on_stop()
    assert open_offsets([table]) == {}
    reopened = store.handle(1)  # would find the store locked if a handle lived
    assert reopened.get(store.offset_key) == b"3"


def test_the_inventory_opens_only_the_stores_not_open_here(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = table.data
    store.set_persisted_offset(_changelog(table, 0), 10)
    store.set_persisted_offset(_changelog(table, 1), 20)
    store.set_persisted_offset(_changelog(table, 2), 30)
    store.revoke_partitions(table, {_changelog(table, 2)})  # kept on disk, closed here
    for future in store.handles.closes_under_way():
        future.result()
    read: list[Path] = []

    def reading(path: Path) -> int | None:
        read.append(path)
        return read_persisted_offset(path)

    monkeypatch.setattr("tables.inventory.read_persisted_offset", reading)
    changelog = table.changelog_topic.get_topic_name()
    assert _inventory(table).offsets(known=open_offsets([table])) == {
        changelog: {0: 11, 1: 21, 2: 31}
    }
    assert [path.name for path in read] == ["counts-2.db"]


def test_a_table_whose_store_is_not_created_has_none_open_and_gets_none(tmp_path: Path) -> None:
    app = streamapp.App("offsets-test-unstarted", datadir=str(tmp_path))
    table = app.Table("counts", partitions=4)
    assert open_offsets([table]) == {}
    assert store_of(table) is None
    assert vars(table).get("_data") is None  # not created on the caller's (consumer) thread
