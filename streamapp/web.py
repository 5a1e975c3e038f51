"""The worker's views: ``GET /streamapp/assignment`` (what it holds) and ``GET /metrics``."""

from __future__ import annotations

from typing import Any

from faust.web import Request, Response, View

from standby.runtime import ReplicaRuntime, by_topic
from streamapp.bad_records import bad_records_of


def assignment_view(app: Any) -> dict[str, Any]:
    """What this worker holds now, and what recovery has cost it."""
    runtime: ReplicaRuntime = app.streamapp_runtime
    settings = app.streamapp_settings
    share = runtime.share
    member_id, generation = runtime.member()
    bad_records = bad_records_of(app)
    lag: dict[str, dict[str, int]] = {}
    for tp, records in sorted(runtime.replica_lag.items()):
        lag.setdefault(tp.topic, {})[str(tp.partition)] = records
    return {
        "client_id": settings.client_id,
        "member_id": member_id,
        "generation": generation,
        "host": settings.host,
        "rack": settings.rack,
        # From Faust's assignor API, so that the view also works under stock Faust's assignor.
        "active": by_topic(app.assignor.assigned_actives()),
        "standby": dict(share.standby) if share else by_topic(app.assignor.assigned_standbys()),
        "warmup": dict(share.warmup) if share else {},
        "recovery": runtime.meter.as_json(),
        "rebalances": runtime.meter.rebalances,
        "plan_generation": share.generation if share else None,
        "followup_pending": runtime.followup.pending,
        "replica_lag": lag,
        "history": list(runtime.history),
        # Per source topic, the records this worker skipped or dead-lettered since it started
        # (streamapp.bad_records); empty under an app that is not a streamapp.App.
        "bad_records": bad_records.counts.as_json() if bad_records is not None else {},
    }


def register_views(app: Any) -> None:
    @app.page("/streamapp/assignment")
    class AssignmentView(View):
        async def get(self, request: Request) -> Response:
            return self.json(assignment_view(self.app))

    @app.page("/metrics")
    class MetricsView(View):
        async def get(self, request: Request) -> Response:
            from streamapp import metrics

            # prometheus_client's content type carries its own charset parameter.
            content_type, _, _ = metrics.CONTENT_TYPE_LATEST.partition(";")
            return self.bytes(metrics.render(self.app), content_type=content_type)
