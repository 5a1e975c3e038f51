"""The clean-shutdown marker and the discard of local state, on real rocksdict stores."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import rocksdict

from tables import clean_shutdown
from tables.clean_shutdown import (
    ACTIVE_MARKS_DIR,
    MARKER_FILE,
    StateInUseError,
    active_marks,
    begin_run,
    mark_active,
    mark_clean_shutdown,
    must_discard,
    store_paths,
)
from tables.inventory import OFFSET_KEY, LocalStateInventory
from tables.ownership import OWNERSHIP_FILE, Ownership, load_ownership, save_ownership

CHANGELOGS = {"counts": "app-counts-changelog"}


def _store(tabledir: Path, name: str, offset: int) -> Path:
    path = tabledir / name
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    db.put(b"k", b"v")
    db.put(OFFSET_KEY, str(offset).encode())
    db.close()
    return path


@pytest.mark.parametrize(
    ("exactly_once", "clean_shutdown", "marks_kept", "marked_active", "expected"),
    [
        # A crash under exactly_once: a store this run wrote to goes, a replica's stays.
        (True, False, True, True, True),
        (True, False, True, False, False),
        # ... unless the data dir kept no marks (an older streamapp's): nothing is known.
        (True, False, False, False, True),
        # A clean stop: every store holds committed state.
        (True, True, True, True, False),
        (True, True, False, False, False),
        # at_least_once replays over what it has.
        (False, False, True, True, False),
        (False, False, False, False, False),
    ],
)
def test_must_discard_only_stores_written_before_a_crash_under_exactly_once(
    exactly_once: bool, clean_shutdown: bool, marks_kept: bool, marked_active: bool, expected: bool
) -> None:
    assert (
        must_discard(
            exactly_once=exactly_once,
            clean_shutdown=clean_shutdown,
            marks_kept=marks_kept,
            marked_active=marked_active,
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


def test_after_a_crash_in_a_data_dir_without_marks_every_store_and_claim_goes(
    tmp_path: Path,
) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    (tabledir / "unrelated.txt").write_text("kept")
    discarded = begin_run(tabledir, data_dir, exactly_once=True)
    assert [p.name for p in discarded] == ["counts-0.db", "counts-3.db"]
    assert store_paths(tabledir) == []
    assert (tabledir / "unrelated.txt").exists()
    # The inventory reports no state, and the worker claims no tasks it held.
    assert LocalStateInventory(tabledir, CHANGELOGS).offsets() == {}
    assert load_ownership(data_dir) == Ownership(generation=4)
    # From now on the data dir keeps marks: a crash of a run that made none discards nothing.
    assert (tabledir / ACTIVE_MARKS_DIR).is_dir()
    _store(tabledir, "counts-3.db", 9)
    assert begin_run(tabledir, data_dir, exactly_once=True) == []


def _run_with_marks(tmp_path: Path, *marked: str) -> tuple[Path, Path]:
    """A data dir whose last run started cleanly, marked ``marked`` active, then crashed."""
    data_dir, tabledir = _worker_dirs(tmp_path)
    save_ownership(data_dir, Ownership(generation=4, active={"src": [0]}, standby={"src": [3]}))
    mark_clean_shutdown(tabledir)
    assert begin_run(tabledir, data_dir, exactly_once=True) == []
    assert mark_active(tabledir, marked) == list(marked)
    return data_dir, tabledir


def test_after_a_crash_under_exactly_once_only_the_stores_written_go(tmp_path: Path) -> None:
    data_dir, tabledir = _run_with_marks(tmp_path, "counts-0.db")
    discarded = begin_run(tabledir, data_dir, exactly_once=True)
    assert [p.name for p in discarded] == ["counts-0.db"]
    # The standby's store and its claim stay; the active's claim goes with its store.
    assert LocalStateInventory(tabledir, CHANGELOGS).offsets() == {"app-counts-changelog": {3: 8}}
    assert load_ownership(data_dir) == Ownership(generation=4, standby={"src": [3]})
    assert active_marks(tabledir) == set()
    # Nothing is marked in the run that follows until it is assigned an active: its own crash
    # keeps the standby.
    assert begin_run(tabledir, data_dir, exactly_once=True) == []


def test_a_standby_that_became_active_before_the_crash_goes(tmp_path: Path) -> None:
    data_dir, tabledir = _run_with_marks(tmp_path)
    # A rebalance promoted partition 3, whose store was a standby until then.
    assert mark_active(tabledir, ["counts-3.db"]) == ["counts-3.db"]
    assert mark_active(tabledir, ["counts-3.db"]) == []  # marked once
    discarded = begin_run(tabledir, data_dir, exactly_once=True)
    assert [p.name for p in discarded] == ["counts-3.db"]
    assert LocalStateInventory(tabledir, CHANGELOGS).offsets() == {"app-counts-changelog": {0: 42}}


def test_a_clean_stop_clears_every_mark(tmp_path: Path) -> None:
    data_dir, tabledir = _run_with_marks(tmp_path, "counts-0.db", "counts-3.db")
    mark_clean_shutdown(tabledir)
    assert begin_run(tabledir, data_dir, exactly_once=True) == []
    assert active_marks(tabledir) == set()
    assert len(store_paths(tabledir)) == 2


def test_a_crash_under_at_least_once_keeps_the_marks_for_a_switch_to_exactly_once(
    tmp_path: Path,
) -> None:
    data_dir, tabledir = _run_with_marks(tmp_path, "counts-0.db")
    assert begin_run(tabledir, data_dir, exactly_once=False) == []
    assert active_marks(tabledir) == {"counts-0.db"}
    # The at_least_once run crashes too; the next runs under exactly_once.
    discarded = begin_run(tabledir, data_dir, exactly_once=True)
    assert [p.name for p in discarded] == ["counts-0.db"]


def test_a_mark_without_its_store_is_dropped(tmp_path: Path) -> None:
    data_dir, tabledir = _run_with_marks(tmp_path, "counts-5.db")  # never created
    assert begin_run(tabledir, data_dir, exactly_once=True) == []
    assert active_marks(tabledir) == set()


def test_after_a_clean_stop_the_stores_are_kept_and_the_marker_consumed(tmp_path: Path) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    mark_clean_shutdown(tabledir)
    assert begin_run(tabledir, data_dir, exactly_once=True) == []
    assert LocalStateInventory(tabledir, CHANGELOGS).offsets() == {
        "app-counts-changelog": {0: 42, 3: 8}
    }
    assert (data_dir / OWNERSHIP_FILE).exists()
    # A crash in this run must be noticed at the next start: what it marked active goes.
    assert not (tabledir / MARKER_FILE).exists()
    mark_active(tabledir, ["counts-0.db", "counts-3.db"])
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


class _NotingLock:
    """`clean_shutdown._marking` as it is, noting how many calls came to take it."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.calls = 0
        self.second_came = threading.Event()

    def __enter__(self) -> None:
        self.calls += 1
        if self.calls == 2:
            self.second_came.set()
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_a_mark_still_being_synced_is_not_taken_for_a_durable_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rebalance cancelled while its marks were made on a thread leaves that thread running;
    # the next rebalance's call finds the mark file there before it is synced.
    tabledir = tmp_path / "tables"
    lock = _NotingLock(clean_shutdown._marking)
    monkeypatch.setattr(clean_shutdown, "_marking", lock)
    in_fsync, release = threading.Event(), threading.Event()
    synced: list[str] = []
    real = os.fsync

    def held_fsync(fd: int) -> None:
        in_fsync.set()
        release.wait(timeout=10)  # only keeps a regression from hanging the suite
        real(fd)
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name)

    monkeypatch.setattr(os, "fsync", held_fsync)

    thread = threading.Thread(target=mark_active, args=(tabledir, ["counts-0.db"]))
    thread.start()
    in_fsync.wait(timeout=10)
    assert (tabledir / ACTIVE_MARKS_DIR / "counts-0.db.active").exists()  # not synced yet
    # The first call is let go once the second waits for it. A second call that does not wait
    # returns while the first is still in its fsync.
    threading.Thread(target=lambda: lock.second_came.wait(timeout=10) and release.set()).start()
    second = mark_active(tabledir, ["counts-0.db"])
    synced_then = list(synced)
    release.set()
    thread.join()
    assert second == []
    assert synced_then == ["counts-0.db.active", ACTIVE_MARKS_DIR]
