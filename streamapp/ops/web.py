"""The worker's views: ``GET /streamapp/assignment`` (what it holds), ``GET /metrics``, and the
group page ``GET /streamapp/`` with its data ``GET /streamapp/group`` (every worker's view)."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

from faust.exceptions import ConsumerNotStarted
from faust.types import TP
from faust.web import Request, Response, View

from standby.runtime import ReplicaRuntime, by_topic
from streamapp.bad_records import bad_records_of
from streamapp.ops import group_fetch, group_page
from streamapp.runtime.consumer import Consumer


def assignment_view(app: Any) -> dict[str, Any]:
    """What this worker holds now, and what recovery has cost it."""
    runtime: ReplicaRuntime = app.streamapp_runtime
    settings = app.streamapp_settings
    share = runtime.share
    member_id, generation = runtime.member()
    bad_records = bad_records_of(app)
    return {
        "client_id": settings.client_id,
        # The URL streamapp's assignor announces to the group (`AssignorInterface.url`).
        "url": str(app.conf.canonical_url),
        "member_id": member_id,
        "generation": generation,
        "host": settings.host,
        "rack": settings.rack,
        # From Faust's assignor API, so that the view also works under stock Faust's assignor.
        "active": by_topic(app.assignor.assigned_actives()),
        "standby": dict(share.standby) if share else by_topic(app.assignor.assigned_standbys()),
        "warmup": dict(share.warmup) if share else {},
        "recovery": runtime.meter.as_json(),
        "recovering": recovering(app),
        "rebalances": runtime.meter.rebalances,
        "plan_generation": share.generation if share else None,
        "followup_pending": runtime.followup.coming,
        # Source partitions of the assignment paused now: some are while a rebalance recovers
        # their tables, none once it is over.
        "paused": paused_streams(app),
        "replica_lag": _by_partition(runtime.replica_lag),
        # The changelog ends that lag was measured against (read every second): a reader that
        # wrote to a changelog knows the lag is measured after its writes once these reach them.
        "replica_ends": _by_partition(runtime.replica_ends),
        "history": list(runtime.history),
        # Per source topic, the records this worker skipped or dead-lettered since it started
        # (streamapp.bad_records); empty under an app that is not a streamapp.App.
        "bad_records": bad_records.counts.as_json() if bad_records is not None else {},
    }


def paused_streams(app: Any) -> dict[str, list[int]]:
    """Topic -> the partitions of it this worker holds paused (none under a consumer that
    cannot tell, stock Faust's)."""
    consumer = app.consumer
    if not isinstance(consumer, Consumer):
        return {}
    try:
        return by_topic(consumer.paused_streams())
    except ConsumerNotStarted:  # the view may be asked before the consumer has started
        return {}


def _by_partition(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """Topic -> partition (as a JSON key) -> the number given for it."""
    by_topic: dict[str, dict[str, int]] = {}
    for tp, number in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, {})[str(tp.partition)] = number
    return by_topic


def recovering(app: Any) -> dict[str, Any]:
    """Whether the actives are replaying their changelogs now, and what is left to replay."""
    recovery = app.tables.recovery
    if not recovery.in_recovery:
        return {"in_recovery": False, "partitions_remaining": 0, "records_remaining": 0}
    remaining = recovery.active_remaining()
    return {
        "in_recovery": True,
        "partitions_remaining": len(remaining),
        "records_remaining": sum(remaining.values()),
    }


async def group_view(app: Any) -> dict[str, Any]:
    """The whole group as this worker's plan names it: its own view and its peers'."""
    own = assignment_view(app)
    share = app.streamapp_runtime.share
    urls = group_page.peer_urls(own["url"], share.actives_by_url if share else ())
    views, errors = await group_fetch.fetch_views(urls, {urls[0]: own})
    return group_page.group_picture(views, errors, source=urls[0])


def register_views(app: Any) -> None:
    @app.page("/streamapp/assignment")
    class AssignmentView(View):
        async def get(self, request: Request) -> Response:
            return self.json(assignment_view(self.app))

    @app.page("/streamapp/group")
    class GroupView(View):
        async def get(self, request: Request) -> Response:
            return self.json(await group_view(self.app))

    @app.page("/streamapp/")
    class GroupPage(View):
        async def get(self, request: Request) -> Response:
            return self.html(group_page_html())

    @app.page("/metrics")
    class MetricsView(View):
        async def get(self, request: Request) -> Response:
            from streamapp.ops import metrics

            # prometheus_client's content type carries its own charset parameter.
            content_type, _, _ = metrics.CONTENT_TYPE_LATEST.partition(";")
            return self.bytes(metrics.render(self.app), content_type=content_type)


def group_page_html() -> str:
    """The page: one self-contained HTML file (inline CSS and JS), shipped with the package."""
    return resources.files("streamapp.ops").joinpath("group_page.html").read_text(encoding="utf-8")
