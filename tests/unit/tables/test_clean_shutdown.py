"""What a worker keeps of the stores the previous run left (clean-shutdown marker, the run's
guarantee, an older streamapp's active marks), on real rocksdict stores."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import rocksdict

from tables.clean_shutdown import (
    ACTIVE_MARKS_DIR,
    MARK_SUFFIX,
    MARKER_FILE,
    StateInUseError,
    active_marks,
    begin_run,
    mark_clean_shutdown,
    must_discard,
    previous_guarantee,
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
    ("exactly_once", "clean_shutdown", "previous", "marks_kept", "marked_active", "expected"),
    [
        # A crash of a run under exactly_once: its stores hold committed writes only.
        (True, False, "exactly_once", False, False, False),
        # A crash of a run under at_least_once: its stores hold writes not committed.
        (True, False, "at_least_once", False, False, True),
        (True, False, "at_least_once", True, False, True),
        # An older streamapp's data dir: a store it marked active goes, a replica's stays...
        (True, False, None, True, True, True),
        (True, False, None, True, False, False),
        (True, False, "exactly_once", True, True, True),
        # ... and one that kept no marks says nothing: every store goes.
        (True, False, None, False, False, True),
        # A clean stop: every store holds committed state.
        (True, True, "at_least_once", False, False, False),
        (True, True, None, True, True, False),
        (True, True, None, False, False, False),
        # at_least_once replays over what it has.
        (False, False, "at_least_once", False, False, False),
        (False, False, None, True, True, False),
        (False, False, None, False, False, False),
    ],
)
def test_must_discard_only_stores_that_may_hold_uncommitted_writes(
    exactly_once: bool,
    clean_shutdown: bool,
    previous: str | None,
    marks_kept: bool,
    marked_active: bool,
    expected: bool,
) -> None:
    assert (
        must_discard(
            exactly_once=exactly_once,
            clean_shutdown=clean_shutdown,
            previous_guarantee=previous,
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


def _older_marks(tabledir: Path, *marked: str) -> None:
    """The active marks an older streamapp made as ``marked`` became actives under
    exactly_once (and the empty directory it kept from its first start)."""
    marks = tabledir / ACTIVE_MARKS_DIR
    marks.mkdir(parents=True, exist_ok=True)
    for name in marked:
        (marks / (name + MARK_SUFFIX)).write_text("active\n")


def test_after_a_crash_under_exactly_once_every_store_is_kept(tmp_path: Path) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    mark_clean_shutdown(tabledir)
    assert begin_run(tabledir, data_dir, exactly_once=True) == []
    assert previous_guarantee(tabledir) == "exactly_once"
    # This run crashes: its stores, transactional, hold committed writes only.
    assert begin_run(tabledir, data_dir, exactly_once=True) == []
    assert LocalStateInventory(tabledir, CHANGELOGS).offsets() == {
        "app-counts-changelog": {0: 42, 3: 8}
    }
    assert load_ownership(data_dir) == Ownership(generation=4, active={"src": [0, 3]})
    assert not (tabledir / ACTIVE_MARKS_DIR).exists()


def test_after_a_crash_in_a_data_dir_that_says_nothing_every_store_and_claim_goes(
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
    # Discarded once: from now on the data dir says how it was written.
    _store(tabledir, "counts-3.db", 9)
    assert begin_run(tabledir, data_dir, exactly_once=True) == []


def test_an_older_streamapps_marked_stores_go_once_and_the_marks_with_them(
    tmp_path: Path,
) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    save_ownership(data_dir, Ownership(generation=4, active={"src": [0]}, standby={"src": [3]}))
    _older_marks(tabledir, "counts-0.db", "counts-5.db")  # counts-5.db: never created
    discarded = begin_run(tabledir, data_dir, exactly_once=True)
    assert [p.name for p in discarded] == ["counts-0.db"]
    # The standby's store and its claim stay; the active's claim goes with its store.
    assert LocalStateInventory(tabledir, CHANGELOGS).offsets() == {"app-counts-changelog": {3: 8}}
    assert load_ownership(data_dir) == Ownership(generation=4, standby={"src": [3]})
    assert not (tabledir / ACTIVE_MARKS_DIR).exists()
    assert active_marks(tabledir) == set()
    # This run crashes in turn: nothing more goes.
    _store(tabledir, "counts-0.db", 50)
    assert begin_run(tabledir, data_dir, exactly_once=True) == []
    assert len(store_paths(tabledir)) == 2


def test_an_older_streamapps_clean_stop_keeps_every_store(tmp_path: Path) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    _older_marks(tabledir, "counts-0.db", "counts-3.db")
    mark_clean_shutdown(tabledir)
    assert begin_run(tabledir, data_dir, exactly_once=True) == []
    assert active_marks(tabledir) == set()
    assert len(store_paths(tabledir)) == 2


def test_a_crash_under_at_least_once_discards_every_store_at_a_switch_to_exactly_once(
    tmp_path: Path,
) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    _older_marks(tabledir, "counts-0.db")  # an older streamapp's run, which crashed
    mark_clean_shutdown(tabledir)
    assert begin_run(tabledir, data_dir, exactly_once=True) == []
    # A crash under exactly_once, then a run under at_least_once keeps what it finds...
    assert begin_run(tabledir, data_dir, exactly_once=False) == []
    assert previous_guarantee(tabledir) == "at_least_once"
    assert len(store_paths(tabledir)) == 2
    # ... which wrote its stores directly and crashed: under exactly_once they all go.
    discarded = begin_run(tabledir, data_dir, exactly_once=True)
    assert [p.name for p in discarded] == ["counts-0.db", "counts-3.db"]
    assert previous_guarantee(tabledir) == "exactly_once"


def test_a_clean_stop_under_at_least_once_keeps_the_stores_for_exactly_once(
    tmp_path: Path,
) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    assert begin_run(tabledir, data_dir, exactly_once=False) == []
    mark_clean_shutdown(tabledir)
    assert begin_run(tabledir, data_dir, exactly_once=True) == []
    assert len(store_paths(tabledir)) == 2


def test_after_a_clean_stop_the_stores_are_kept_and_the_marker_consumed(tmp_path: Path) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    mark_clean_shutdown(tabledir)
    assert begin_run(tabledir, data_dir, exactly_once=False) == []
    assert LocalStateInventory(tabledir, CHANGELOGS).offsets() == {
        "app-counts-changelog": {0: 42, 3: 8}
    }
    assert (data_dir / OWNERSHIP_FILE).exists()
    # A crash in this run (at_least_once) must be noticed at the next start.
    assert not (tabledir / MARKER_FILE).exists()
    assert len(begin_run(tabledir, data_dir, exactly_once=True)) == 2


def test_at_least_once_keeps_state_after_a_crash(tmp_path: Path) -> None:
    data_dir, tabledir = _worker_dirs(tmp_path)
    assert begin_run(tabledir, data_dir, exactly_once=False) == []
    assert len(store_paths(tabledir)) == 2


def test_a_first_start_has_nothing_to_discard(tmp_path: Path) -> None:
    tabledir = tmp_path / "data" / "v1" / "tables"
    assert begin_run(tabledir, tmp_path / "data", exactly_once=True) == []
    assert previous_guarantee(tabledir) == "exactly_once"
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
