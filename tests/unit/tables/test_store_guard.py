"""A table's RocksDB store (streamapp's), closed and set aside by partition (a real store, no
broker)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.types import TP

from streamapp.runtime.stores import STORE_URL
from tables import store_guard
from tables.clean_shutdown import ACTIVE_MARKS_DIR, active_marks
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


class _BlockingFsync:
    """os.fsync held until the test lets it go, noting which file each call was for.

    ``timeout`` only keeps a regression from hanging the suite: a fsync that blocks the event
    loop is never let go by it, and the test then fails on what was noted.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.real = os.fsync
        self.loop = loop
        self.started = asyncio.Event()
        self.release = threading.Event()
        self.synced: list[str] = []
        self.released_by_loop = False

    def __call__(self, fd: int) -> None:
        self.loop.call_soon_threadsafe(self.started.set)
        self.released_by_loop = self.release.wait(timeout=10)
        self.release.set()  # after a regression's wait, the other fsyncs go at once
        self.synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        self.real(fd)


async def test_the_marks_are_made_off_the_event_loop_and_durable_on_return(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsync = _BlockingFsync(asyncio.get_running_loop())
    monkeypatch.setattr(os, "fsync", fsync)
    topic = store_guard.changelog_topic(table)
    ran_meanwhile: list[bool] = []

    async def other_work() -> None:
        # Runs only if the loop is free while a mark's fsync is in progress.
        await fsync.started.wait()
        ran_meanwhile.append(fsync.synced == [])
        fsync.release.set()

    other = asyncio.create_task(other_work())
    added = await store_guard.mark_assigned_actives(
        [table], {TP(topic, 2), TP(topic, 0), TP("source", 1)}
    )
    await other
    assert ran_meanwhile == [True] and fsync.released_by_loop
    assert added == ["counts-0.db", "counts-2.db"]
    marks = Path(table.data.partition_path(0)).parent / ACTIVE_MARKS_DIR
    # Every mark and then their directory, once, synced by the time the call returned.
    assert fsync.synced == [
        str(marks / "counts-0.db.active"),
        str(marks / "counts-2.db.active"),
        str(marks),
    ]
    assert active_marks(marks.parent) == {"counts-0.db", "counts-2.db"}


async def test_every_tables_marks_share_one_directory_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = faust.App("guard-test-two", store=STORE_URL, datadir=str(tmp_path))
    tables = [app.Table("counts", partitions=4), app.Table("sums", partitions=4)]
    synced: list[str] = []
    real = os.fsync

    def noting(fd: int) -> None:
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name)
        real(fd)

    monkeypatch.setattr(os, "fsync", noting)
    actives = {TP(store_guard.changelog_topic(t), 1) for t in tables}
    assert await store_guard.mark_assigned_actives(tables, actives) == ["counts-1.db", "sums-1.db"]
    assert synced == ["counts-1.db.active", "sums-1.db.active", ACTIVE_MARKS_DIR]
    # Marked already: nothing to sync.
    assert await store_guard.mark_assigned_actives(tables, actives) == []
    assert len(synced) == 3
