"""A table's RocksDB store (streamapp's), closed and set aside by partition (a real store, no
broker)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.types import TP

from streamapp.runtime.stores import STORE_URL
from tables import store_guard
from tables.damaged import DAMAGED_DIR


@pytest.fixture
def table(tmp_path: Path) -> Any:
    app = faust.App("guard-test", store=STORE_URL, datadir=str(tmp_path))
    return app.Table("counts", partitions=4)


def _write(table: Any, partition: int, offset: int) -> Path:
    store = table.data
    store.handle(partition).put(b"k", b"v")
    store.set_persisted_offset(TP(store_guard.changelog_topic(table), partition), offset)
    return Path(store.partition_path(partition))


def _close(table: Any, *partitions: int) -> None:
    for partition in partitions:
        table.data.close_partition(partition)


def test_an_open_store_is_closed_moved_and_then_created_afresh(table: Any) -> None:
    path = _write(table, 2, offset=41)
    kept = _write(table, 1, offset=7)
    table.data.key_index[b"k"] = 2
    target = store_guard.close_and_move_aside(table, 2)
    assert target is not None and target.parent == path.parent / DAMAGED_DIR
    assert not path.exists() and (target / "CURRENT").exists()
    assert table.data.open_partitions() == {1} and kept.exists()
    assert b"k" not in table.data.key_index  # it would send reads to the store set aside
    changelog = TP(store_guard.changelog_topic(table), 2)
    assert table.data.persisted_offset(changelog) is None  # a fresh, empty store
    assert table.data.persisted_offset(TP(changelog.topic, 1)) == 7


def test_no_store_on_disk_moves_nothing(table: Any) -> None:
    assert store_guard.close_and_move_aside(table, 3) is None


def test_unreadable_stores_of_an_assignment_go_aside_before_faust_opens_them(
    table: Any, caplog: pytest.LogCaptureFixture
) -> None:
    topic = store_guard.changelog_topic(table)
    path = _write(table, 0, offset=3)
    _close(table, 0)  # as a revocation leaves it: closed, kept on disk
    (path / "CURRENT").write_bytes(b"garbage\n")
    open_one = _write(table, 1, offset=3)
    (open_one / "CURRENT").write_bytes(b"garbage\n")  # open: its handle still works
    with caplog.at_level(logging.WARNING, logger="tables.store_guard"):
        moved = store_guard.set_aside_unreadable(
            table, {TP(topic, 0), TP(topic, 1), TP("source", 0)}
        )
    assert [p.parent for p in moved] == [path.parent / DAMAGED_DIR]
    assert open_one.exists()
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(
        "streamapp: local store of table counts partition 0 is unreadable "
        "(Corruption: CURRENT file corrupted): moved to "
    )
    assert table.data.persisted_offset(TP(topic, 0)) is None


def test_stores_beyond_the_partition_count_go_aside(
    table: Any, caplog: pytest.LogCaptureFixture
) -> None:
    inside = _write(table, 1, offset=3)
    beyond = _write(table, 3, offset=3)
    _close(table, 1, 3)
    with caplog.at_level(logging.WARNING, logger="tables.store_guard"):
        assert store_guard.set_aside_beyond_partition_count(table, None) == []
        moved = store_guard.set_aside_beyond_partition_count(table, 2)
    assert len(moved) == 1 and not beyond.exists() and inside.exists()
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (
        "streamapp: local store of table counts partition 3 is beyond the 2 partitions of its "
        f"changelog guard-test-counts-changelog: moved to {moved[0]}"
    )
