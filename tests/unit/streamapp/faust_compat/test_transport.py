"""A streamapp consumer runs our assignor even where Faust would fall back to round robin."""

from __future__ import annotations

from pathlib import Path

from streamapp import App
from streamapp.partition_assignor import StreamappPartitionAssignor


async def test_no_tables_no_standbys_still_our_assignor(tmp_path: Path) -> None:
    app = App("sa-no-tables", num_standby_replicas=0, datadir=str(tmp_path))
    assert not app.tables.changelog_topics and app.conf.table_standby_replicas == 0
    thread = app.consumer._thread  # type: ignore[attr-defined]
    consumer = thread._create_worker_consumer(app.transport)  # built, never started
    assert isinstance(app.assignor, StreamappPartitionAssignor)
    assert consumer._partition_assignment_strategy == [app.assignor]
