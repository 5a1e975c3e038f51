"""The worker's introspection views: ``GET /streamapp/assignment`` (contracts/cli.md)."""

from __future__ import annotations

from typing import Any

from faust.web import Request, Response, View

from standby.runtime import ReplicaRuntime


def assignment_view(app: Any) -> dict[str, Any]:
    """What this worker holds now, and what recovery has cost it."""
    runtime: ReplicaRuntime = app.streamapp_runtime
    settings = app.streamapp_settings
    share = runtime.share
    member_id, generation = runtime.member()
    lag: dict[str, dict[str, int]] = {}
    for tp, records in sorted(runtime.replica_lag.items()):
        lag.setdefault(tp.topic, {})[str(tp.partition)] = records
    return {
        "client_id": settings.client_id,
        "member_id": member_id,
        "generation": generation,
        "host": settings.host,
        "rack": settings.rack,
        "active": dict(share.active) if share else {},
        "standby": dict(share.standby) if share else {},
        "warmup": dict(share.warmup) if share else {},
        "recovery": runtime.meter.as_json(),
        "rebalances": runtime.meter.rebalances,
        "plan_generation": share.generation if share else None,
        "followup_pending": runtime.followup.pending,
        "replica_lag": lag,
        "history": list(runtime.history),
    }


def register_views(app: Any) -> None:
    @app.page("/streamapp/assignment")
    class AssignmentView(View):
        async def get(self, request: Request) -> Response:
            return self.json(assignment_view(self.app))
