"""A stopping worker waits for its last ownership record, which is written off the consumer
thread (`tables.ownership_writer`): the next start reads it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from streamapp import App
from streamapp.partition_assignor import StreamappPartitionAssignor
from tables import ownership_writer
from tables.ownership import Ownership, load_ownership, save_ownership


async def test_a_clean_stop_leaves_the_last_assignments_record_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = App("t-ownership-stop", broker="kafka://127.0.0.1:1", datadir=str(tmp_path))
    assignor = app.assignor
    assert isinstance(assignor, StreamappPartitionAssignor)
    release = threading.Event()

    def held_save(data_dir: Path, ownership: Ownership) -> None:
        release.wait(timeout=10)  # only keeps a regression from hanging the suite
        save_ownership(data_dir, ownership)

    flush = assignor.flush_ownership

    def flush_then_release(timeout: float | None = None) -> bool:
        # The write goes on only once the stop asks for it: a stop that does not wait for it
        # returns before the file exists.
        release.set()
        return flush(timeout)

    monkeypatch.setattr(ownership_writer, "save_ownership", held_save)
    monkeypatch.setattr(assignor, "flush_ownership", flush_then_release)
    assignor._ownership.save(Ownership(generation=5, active={"src": [1]}))
    await app.on_shutdown()
    assert load_ownership(app.conf.datadir) == Ownership(generation=5, active={"src": [1]})
