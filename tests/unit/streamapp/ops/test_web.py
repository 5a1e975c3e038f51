"""The worker's ``/streamapp/assignment`` view: replica lags come with the ends they were
measured against."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from streamapp import App
from streamapp.ops.web import assignment_view


def test_the_view_gives_each_replica_lag_with_the_end_it_was_measured_against(
    tmp_path: Path,
) -> None:
    app = App("web-view", datadir=str(tmp_path))
    changelog = "web-view-counts-changelog"
    runtime: Any = SimpleNamespace(
        share=None,
        replica_lag={TP(changelog, 2): 7, TP(changelog, 0): 0},
        replica_ends={TP(changelog, 2): 1207, TP(changelog, 0): 81},
        followup=SimpleNamespace(coming=False),
        history=[],
        meter=SimpleNamespace(rebalances=0, as_json=lambda: {}),
        member=lambda: ("m", 1),
    )
    app.streamapp_runtime = runtime  # type: ignore[attr-defined]
    view = assignment_view(app)
    assert view["replica_lag"] == {changelog: {"0": 0, "2": 7}}
    assert view["replica_ends"] == {changelog: {"0": 81, "2": 1207}}
