"""tables.recovery: what Faust's recovery holds is written or dropped only where it is safe."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faust.types import TP

from streamapp import App
from tables.recovery import Recovery, TableManager


def _app(tmp_path: Path) -> Any:
    app = App("t-recovery", broker="kafka://127.0.0.1:1", datadir=str(tmp_path))
    app.Table("counts", default=int, partitions=2)
    return app


def test_a_streamapp_app_recovers_through_the_streamapp_recovery(tmp_path: Path) -> None:
    app = _app(tmp_path)
    assert isinstance(app.tables, TableManager)
    assert isinstance(app.tables.recovery, Recovery)


def test_the_changelog_queue_outlives_a_flow_resume(tmp_path: Path) -> None:
    # Faust's queue is emptied by every app.flow_control.resume(); recovery calls it while
    # standbys read, and what they had fetched was lost with their offsets moving past it.
    app = _app(tmp_path)
    queue = app.tables.changelog_queue
    queue.put_nowait("a fetched changelog record")
    app.flow_control.resume()
    assert queue.qsize() == 1


def test_a_revocation_empties_the_changelog_queue(tmp_path: Path) -> None:
    # What it holds belongs to the old assignment; the next one seeks every changelog afresh.
    app = _app(tmp_path)
    queue = app.tables.changelog_queue
    queue.put_nowait("a record of the old assignment")
    app.tables.recovery.on_partitions_revoked({TP("t-recovery-counts-changelog", 0)})
    assert queue.qsize() == 0


async def test_offsets_of_partitions_no_longer_standbys_are_dropped(tmp_path: Path) -> None:
    app = _app(tmp_path)
    recovery = app.tables.recovery
    promoted = TP("t-recovery-counts-changelog", 1)
    recovery.standby_offsets[promoted] = 41
    # Faust returns early from on_rebalance on a generation it is not at; the standby set is
    # then the one it had, here empty.
    app.consumer_generation_id = 7
    await recovery.on_rebalance(set(), set(), set(), generation_id=6)
    assert promoted not in recovery.standby_offsets
