"""The clean-shutdown marker and the discard of local state, on real rocksdict stores."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import rocksdict

from tables.clean_shutdown import (
    MARKER_FILE,
    StateInUseError,
    begin_run,
    mark_clean_shutdown,
    must_discard,
    store_paths,
)
from tables.inventory import OFFSET_KEY, LocalStateInventory
from tables.ownership import OWNERSHIP_FILE, Ownership, save_ownership

CHANGELOGS = {"counts": "app-counts-changelog"}


def _store(tabledir: Path, name: str, offset: int) -> Path:
    path = tabledir / name
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    db.put(b"k", b"v")
    db.put(OFFSET_KEY, str(offset).encode())
    db.close()
    return path


@pytest.mark.parametrize(
    ("exactly_once", "clean_shutdown", "has_stores", "expected"),
    [
        (True, False, True, True),  # the one case: a crash under exactly_once
        (True, True, True, False),
        (True, False, False, False),  # first start, or nothing kept
        (False, False, True, False),  # at_least_once replays over what it has
        (False, True, True, False),
    ],
)
def test_must_discard_only_unclean_state_under_exactly_once(
    exactly_once: bool, clean_shutdown: bool, has_stores: bool, expected: bool
) -> None:
    assert (
        must_discard(
            exactly_once=exactly_once, clean_shutdown=clean_shutdown, has_stores=has_stores
        )
        is expected
    )


def _worker_dirs(tmp_path: Path) -> tuple[Path, Path]:
    data_dir = tmp_path / "data"
    tabledir = data_dir / "v1" / "tables"
    _store(tabledir, "counts-0.db", 41)
    _store(tabledir, "counts-3.db", 7)
    save_ownership(data_dir, Ownership(generation=4, active={"src": [0, 3]}))
    return data_dir, tabledir


def test_after_a_crash_under_exactly_once_the_stores_and_claims_are_gone(tmp_path: Path) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    (tabledir / "unrelated.txt").write_text("kept")
    discarded = begin_run(tabledir, data_dir, exactly_once=True)
    assert [p.name for p in discarded] == ["counts-0.db", "counts-3.db"]
    assert store_paths(tabledir) == []
    assert (tabledir / "unrelated.txt").exists()
    # The inventory reports no state, and the worker claims no tasks it held.
    assert LocalStateInventory(tabledir, CHANGELOGS).offsets() == {}
    assert not (data_dir / OWNERSHIP_FILE).exists()


def test_after_a_clean_stop_the_stores_are_kept_and_the_marker_consumed(tmp_path: Path) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    mark_clean_shutdown(tabledir)
    assert begin_run(tabledir, data_dir, exactly_once=True) == []
    assert LocalStateInventory(tabledir, CHANGELOGS).offsets() == {
        "app-counts-changelog": {0: 42, 3: 8}
    }
    assert (data_dir / OWNERSHIP_FILE).exists()
    # A crash in this run must be noticed at the next start.
    assert not (tabledir / MARKER_FILE).exists()
    assert len(begin_run(tabledir, data_dir, exactly_once=True)) == 2


def test_at_least_once_keeps_state_after_a_crash(tmp_path: Path) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    assert begin_run(tabledir, data_dir, exactly_once=False) == []
    assert len(store_paths(tabledir)) == 2


def test_a_first_start_has_nothing_to_discard(tmp_path: Path) -> None:
    tabledir = tmp_path / "data" / "v1" / "tables"
    assert begin_run(tabledir, tmp_path / "data", exactly_once=True) == []
    mark_clean_shutdown(tabledir)
    assert (tabledir / MARKER_FILE).read_text()


def test_stores_open_in_another_process_are_refused_not_deleted(tmp_path: Path) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    holder = textwrap.dedent(
        f"""
        import sys, rocksdict
        db = rocksdict.Rdict({str(tabledir / "counts-3.db")!r})
        print("open", flush=True)
        sys.stdin.read()
        db.close()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
        with pytest.raises(StateInUseError, match=r"counts-3\.db is open in another process"):
            begin_run(tabledir, data_dir, exactly_once=True)
        assert len(store_paths(tabledir)) == 2
    finally:
        proc.communicate(input="", timeout=30)
