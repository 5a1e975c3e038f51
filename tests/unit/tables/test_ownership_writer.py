"""The ownership record written on a thread of its own: the caller never waits for the file."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from tables import ownership_writer
from tables.ownership import Ownership, load_ownership, save_ownership
from tables.ownership_writer import OwnershipWriter


class _HeldSave:
    """save_ownership held until the test lets it go, noting each record it was given.

    The wait's timeout only keeps a regression from hanging the suite.
    """

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.saved: list[int] = []

    def __call__(self, data_dir: Path, ownership: Ownership) -> None:
        self.started.set()
        self.release.wait(timeout=10)
        save_ownership(data_dir, ownership)
        self.saved.append(ownership.generation)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> _HeldSave:
    held = _HeldSave()
    monkeypatch.setattr(ownership_writer, "save_ownership", held)
    return held


def test_save_returns_while_the_file_is_written_and_the_latest_record_wins(
    tmp_path: Path, held: _HeldSave
) -> None:
    writer = OwnershipWriter(tmp_path)
    writer.save(Ownership(generation=1, active={"src": [0]}))
    held.started.wait(timeout=10)
    # The first write is held: the caller (aiokafka's consumer thread) goes on regardless.
    writer.save(Ownership(generation=2, active={"src": [1]}))
    writer.save(Ownership(generation=3, active={"src": [2]}))
    assert held.saved == [] and not writer.flush(timeout=0)
    held.release.set()
    assert writer.flush()
    # The second record was passed over by the third before its turn came.
    assert held.saved == [1, 3]
    assert load_ownership(tmp_path) == Ownership(generation=3, active={"src": [2]})


def test_flush_with_nothing_saved_returns_at_once(tmp_path: Path) -> None:
    assert OwnershipWriter(tmp_path).flush(timeout=0)


def test_a_failed_write_is_logged_and_the_next_record_still_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    writer = OwnershipWriter(blocker)  # the record's directory cannot be made
    with caplog.at_level(logging.WARNING, logger="tables.ownership_writer"):
        writer.save(Ownership(generation=1))
        assert writer.flush()
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"streamapp: ownership record not saved in {blocker}: ")
    writer.data_dir = tmp_path
    writer.save(Ownership(generation=2))
    assert writer.flush()
    assert load_ownership(tmp_path) == Ownership(generation=2)
