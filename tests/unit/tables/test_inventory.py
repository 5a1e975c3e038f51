"""LocalStateInventory on real rocksdict stores laid out the way faust 0.15.3 lays them out."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import rocksdict

from tables.inventory import OFFSET_KEY, LocalStateInventory, read_persisted_offset

CHANGELOGS = {"counts": "app-counts-changelog", "my-table": "app-my-table-changelog"}


def _store(tabledir: Path, name: str, offset: int | None, rows: int = 3) -> Path:
    path = tabledir / name
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    for i in range(rows):
        db.put(f"k{i}".encode(), b"v")
    if offset is not None:
        db.put(OFFSET_KEY, str(offset).encode())  # as faust's Store.set_persisted_offset does
    db.close()
    return path


def test_offsets_of_every_store_on_disk(tmp_path: Path) -> None:
    _store(tmp_path, "counts-0.db", 41)
    _store(tmp_path, "counts-7.db", 0)
    _store(tmp_path, "my-table-12.db", 999)
    _store(tmp_path, "counts-3.db", None)  # opened but never applied a record
    _store(tmp_path, "removed-table-0.db", 5)  # a table the app no longer has
    (tmp_path / "counts-backups").mkdir()
    (tmp_path / "counts-9.db.tmp").write_text("x")
    inventory = LocalStateInventory(tmp_path, CHANGELOGS)
    assert inventory.offsets() == {
        "app-counts-changelog": {0: 42, 7: 1},
        "app-my-table-changelog": {12: 1000},
    }


def test_reads_beside_an_open_writer_without_touching_it(tmp_path: Path) -> None:
    path = tmp_path / "counts-1.db"
    writer = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    writer.put(OFFSET_KEY, b"10")
    assert read_persisted_offset(path) == 10
    writer.put(OFFSET_KEY, b"11")
    writer.put(b"k", b"v")
    assert LocalStateInventory(tmp_path, CHANGELOGS).offsets() == {"app-counts-changelog": {1: 12}}
    assert writer.get(b"k") == b"v"
    writer.close()


def test_missing_dir_and_unreadable_store(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    assert LocalStateInventory(tmp_path / "nope", CHANGELOGS).offsets() == {}
    (tmp_path / "counts-2.db").mkdir()  # a directory that is no RocksDB
    _store(tmp_path, "counts-4.db", 7)
    inventory = LocalStateInventory(tmp_path, CHANGELOGS)
    assert inventory.offsets() == {"app-counts-changelog": {4: 8}}
    assert inventory.offsets() == {"app-counts-changelog": {4: 8}}
    warnings = [r for r in caplog.records if "counts-2.db" in r.getMessage()]
    assert len(warnings) == 1


def test_known_offsets_of_open_stores_are_not_read_from_disk(tmp_path: Path) -> None:
    _store(tmp_path, "counts-0.db", 41)
    _store(tmp_path, "counts-1.db", 7)
    _store(tmp_path, "counts-2.db", 3)
    (tmp_path / "counts-3.db").mkdir()  # unreadable, but open and known here: not read
    known = {
        ("counts", 0): 50,  # written since by the process that has it open
        ("counts", 2): None,  # open, nothing applied (known so: not read)
        ("counts", 3): 12,
        ("counts", 5): 99,  # no store on disk: not reported
    }
    assert LocalStateInventory(tmp_path, CHANGELOGS).offsets(known=known) == {
        "app-counts-changelog": {0: 51, 1: 8, 3: 13}
    }


def test_a_store_nobody_has_open_is_read_once_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store(tmp_path, "counts-0.db", 41)
    _store(tmp_path, "counts-1.db", 7)
    read: list[str] = []

    def reading(path: Path) -> int | None:
        read.append(path.name)
        return read_persisted_offset(path)

    monkeypatch.setattr("tables.inventory.read_persisted_offset", reading)
    inventory = LocalStateInventory(tmp_path, CHANGELOGS)
    expected = {"app-counts-changelog": {0: 42, 1: 8}}
    assert inventory.offsets() == expected
    assert inventory.offsets() == expected
    assert sorted(read) == ["counts-0.db", "counts-1.db"]
    read.clear()
    # Opened and written since (by a worker that then closed it): read again.
    db = rocksdict.Rdict(str(tmp_path / "counts-1.db"), options=rocksdict.Options(raw_mode=True))
    db.put(OFFSET_KEY, b"70")
    db.close()
    assert inventory.offsets() == {"app-counts-changelog": {0: 42, 1: 71}}
    assert read == ["counts-1.db"]
    read.clear()
    # Written by a writer that has it open still (its log grows): read again.
    writer = rocksdict.Rdict(
        str(tmp_path / "counts-0.db"), options=rocksdict.Options(raw_mode=True)
    )
    assert inventory.offsets() == {"app-counts-changelog": {0: 42, 1: 71}}
    writer.put(OFFSET_KEY, b"43")
    assert inventory.offsets() == {"app-counts-changelog": {0: 44, 1: 71}}
    writer.close()
    read.clear()
    # Replaced (set aside, a new store in its place): read again.
    shutil.rmtree(tmp_path / "counts-1.db")
    _store(tmp_path, "counts-1.db", 2)
    assert inventory.offsets() == {"app-counts-changelog": {0: 44, 1: 3}}
    assert "counts-1.db" in read
