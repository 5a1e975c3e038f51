"""Damaged stores found and set aside, on real rocksdict stores (no broker)."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
import rocksdict

from tables.damaged import (
    DAMAGED_DIR,
    beyond_partition_count,
    damaged_path,
    move_aside,
    offset_beyond_end,
    records_missing_before_start,
    set_aside_unreadable,
    unreadable_because,
    without_partitions,
)
from tables.inventory import OFFSET_KEY, LocalStateInventory
from tables.ownership import Ownership, load_ownership, save_ownership

NOW = datetime(2024, 5, 1, 12, 3, 4, 567890, tzinfo=UTC)


def _store(tabledir: Path, name: str, offset: int = 41, rows: int = 2000) -> Path:
    """A store as Faust leaves it, flushed to a table file (``.sst``) and closed."""
    path = tabledir / name
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    for i in range(rows):
        db.put(f"k{i}".encode(), os.urandom(64))
    db.put(OFFSET_KEY, str(offset).encode())
    db.flush()
    db.close()
    return path


def _garbage_current(store: Path) -> None:
    (store / "CURRENT").write_bytes(b"\x00\x17 not a manifest name\n")


def _truncate_sst(store: Path) -> None:
    sst = sorted(store.glob("*.sst"))[0]
    os.truncate(sst, sst.stat().st_size // 2)


def test_a_sound_store_reads(tmp_path: Path) -> None:
    assert unreadable_because(_store(tmp_path, "counts-0.db")) is None


def test_an_empty_directory_is_no_damage(tmp_path: Path) -> None:
    # Faust creates the store in it (create_if_missing).
    (tmp_path / "counts-0.db").mkdir()
    assert unreadable_because(tmp_path / "counts-0.db") is None


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (_garbage_current, "Corruption: CURRENT file corrupted"),
        (_truncate_sst, "Corruption: Sst file size mismatch"),
        (lambda s: next(s.glob("MANIFEST-*")).unlink(), "No such file or directory"),
        (lambda s: next(s.glob("*.sst")).unlink(), "No such file or directory"),
        (lambda s: (s / "CURRENT").unlink(), "No such file or directory"),
    ],
    ids=["garbage CURRENT", "truncated sst", "missing MANIFEST", "missing sst", "missing CURRENT"],
)
def test_damage_is_found_in_one_line(tmp_path: Path, damage: object, expected: str) -> None:
    store = _store(tmp_path, "counts-0.db")
    damage(store)  # type: ignore[operator]
    error = unreadable_because(store)
    assert error is not None
    assert expected in error
    assert "\n" not in error


def test_a_garbled_offset_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "counts-0.db"
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    db.put(OFFSET_KEY, b"forty-one")
    db.close()
    assert "not an integer" in (unreadable_because(path) or "")


def test_unreadable_stores_move_aside_with_one_warning_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tabledir, data_dir = tmp_path / "tables", tmp_path
    sound = _store(tabledir, "counts-0.db", offset=9)
    broken = _store(tabledir, "counts-2.db")
    _garbage_current(broken)
    truncated = _store(tabledir, "counts-3.db")
    _truncate_sst(truncated)
    other = _store(tabledir, "other-app-table-1.db")  # not this app's: never touched
    _garbage_current(other)

    with caplog.at_level(logging.WARNING, logger="tables.damaged"):
        moved = set_aside_unreadable(tabledir, data_dir, ["counts"], now=NOW)

    stamp = "20240501T120304.567890Z"
    assert moved == [
        tabledir / DAMAGED_DIR / f"counts-2.db.{stamp}",
        tabledir / DAMAGED_DIR / f"counts-3.db.{stamp}",
    ]
    assert all((p / "CURRENT").exists() for p in moved)  # kept for inspection, whole
    assert not broken.exists() and not truncated.exists()
    assert sound.exists() and other.exists()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"streamapp: local store of table counts partition 2 is unreadable (Corruption: CURRENT "
        f"file corrupted): moved to {moved[0]}; it is restored from the changelog",
        lines[1],
    ]
    assert lines[1].startswith(
        "streamapp: local store of table counts partition 3 is unreadable (Corruption: Sst file "
        "size mismatch: "
    )
    assert "\n" not in lines[1]
    # The inventory now reports only the sound store; Faust creates fresh ones in place.
    inventory = LocalStateInventory(tabledir, {"counts": "app-counts-changelog"})
    assert inventory.offsets() == {"app-counts-changelog": {0: 10}}
    fresh = rocksdict.Rdict(str(broken), options=rocksdict.Options(raw_mode=True))
    assert fresh.get(OFFSET_KEY) is None
    fresh.close()


def test_a_second_run_finds_nothing_more(tmp_path: Path) -> None:
    _garbage_current(_store(tmp_path, "counts-1.db"))
    assert len(set_aside_unreadable(tmp_path, tmp_path, ["counts"], now=NOW)) == 1
    assert set_aside_unreadable(tmp_path, tmp_path, ["counts"], now=NOW) == []


def test_claims_on_a_set_aside_partition_are_forgotten(tmp_path: Path) -> None:
    save_ownership(
        tmp_path, Ownership(generation=7, active={"src": [1, 2]}, standby={"src": [3], "b": [2]})
    )
    _garbage_current(_store(tmp_path / "tables", "counts-2.db"))
    set_aside_unreadable(tmp_path / "tables", tmp_path, ["counts"], now=NOW)
    assert load_ownership(tmp_path) == Ownership(
        generation=7, active={"src": [1]}, standby={"src": [3]}
    )


def test_sound_stores_leave_the_ownership_record_alone(tmp_path: Path) -> None:
    save_ownership(tmp_path, Ownership(generation=7, active={"src": [2]}))
    before = (tmp_path / "streamapp-ownership.json").stat().st_mtime_ns
    _store(tmp_path / "tables", "counts-2.db")
    assert set_aside_unreadable(tmp_path / "tables", tmp_path, ["counts"]) == []
    assert (tmp_path / "streamapp-ownership.json").stat().st_mtime_ns == before


def test_without_partitions() -> None:
    ownership = Ownership(
        generation=3,
        active={"a": [0, 1], "b": [1]},
        standby={"a": [2]},
        incoming={"a": [1, 4]},
        warmup={"a": [1, 3]},
    )
    assert without_partitions(ownership, {1}) == Ownership(
        generation=3, active={"a": [0]}, standby={"a": [2]}, incoming={"a": [4]}, warmup={"a": [3]}
    )
    assert without_partitions(ownership, set()) == ownership


def test_damaged_paths_never_collide(tmp_path: Path) -> None:
    store = tmp_path / "counts-0.db"
    store.mkdir()
    first = move_aside(store, NOW)
    store.mkdir()
    second = move_aside(store, NOW)
    assert first == tmp_path / "damaged" / "counts-0.db.20240501T120304.567890Z"
    assert second == tmp_path / "damaged" / "counts-0.db.20240501T120304.567890Z.1"
    assert damaged_path(store, NOW).name.endswith(".2")


@pytest.mark.parametrize(
    ("persisted", "highwater", "expected"),
    [
        (None, 10, False),  # applied nothing yet
        (-1, -1, False),
        (10, 10, False),  # caught up
        (5, 10, False),  # behind: recovery replays the tail
        (11, 10, True),
        (41, -1, True),  # the changelog was recreated empty
        (41, 0, True),  # one record: Faust's own check skips a highwater of 0
        (0, -1, True),
        (41, None, False),  # end unknown: no verdict
    ],
)
def test_offset_beyond_end(persisted: int | None, highwater: int | None, expected: bool) -> None:
    assert offset_beyond_end(persisted, highwater) is expected


@pytest.mark.parametrize(
    ("persisted", "log_start", "expected"),
    [
        (None, 10, False),  # applied nothing: the replay starts at the log start anyway
        (-1, 10, False),
        (9, 10, False),  # the next record needed is the first one kept
        (20, 10, False),  # ahead of the log start: the replay goes on from the store
        (8, 10, True),  # offset 9 was deleted
        (41, 1000, True),
        (41, None, False),  # start unknown: no verdict
    ],
)
def test_records_missing_before_start(
    persisted: int | None, log_start: int | None, expected: bool
) -> None:
    assert records_missing_before_start(persisted, log_start) is expected


@pytest.mark.parametrize(
    ("partition", "count", "expected"),
    [(0, 4, False), (3, 4, False), (4, 4, True), (7, 4, True), (9, None, False)],
)
def test_beyond_partition_count(partition: int, count: int | None, expected: bool) -> None:
    assert beyond_partition_count(partition, count) is expected
