"""Wires streamapp's assignment into a Faust app: assignor, transport, replica runtime, views."""

from __future__ import annotations

import asyncio
from typing import Any

from standby.runtime import ReplicaRuntime
from streamapp import quiet_logs
from streamapp.ops.web import register_views

#: ``PartitionAssignor`` setting of a streamapp.App.
PARTITION_ASSIGNOR = "streamapp.partition_assignor:StreamappPartitionAssignor"
#: How often replica lag is measured and the follow-up rebalance considered.
TICK_S = 1.0


def install(app: Any) -> None:
    """Attach the replica runtime to ``app`` and register its web view, signals and tasks."""
    settings = app.streamapp_settings
    runtime = ReplicaRuntime(
        app,
        acceptable_recovery_lag=settings.acceptable_recovery_lag,
        probing_interval_s=settings.probing_rebalance_interval_s,
    )
    app.streamapp_runtime = runtime
    app.on_partitions_revoked.connect(runtime.on_revoked)
    app.on_partitions_assigned.connect(runtime.on_assigned)
    app.on_rebalance_complete.connect(runtime.on_resumed)
    register_views(app)

    async def streamapp_replicas() -> None:
        while True:
            await asyncio.sleep(TICK_S)
            await runtime.tick()

    app.task(streamapp_replicas)

    async def streamapp_changelog_watch() -> None:
        # Declared tables only exist once the app module ran: read them when the worker runs.
        from streamapp.broker_address import app_bootstrap
        from streamapp.changelog_watch import CHECK_INTERVAL_S, ChangelogWatch
        from streamapp.runtime.worker_clients import worker_client_id
        from streamapp.topic_check import declared_topics

        watch = ChangelogWatch(
            app_bootstrap(app),
            declared_topics(app).tables,
            app.conf.topic_replication_factor,
            on_right_again=lambda _topic: app.consumer.refresh_metadata_soon(),
            client_id=worker_client_id(app),
        )
        # The watch names a missing changelog and what to do in one line: aiokafka's repeats of
        # "not found in cluster metadata" about it are chatter.
        quiet_logs.explain_topics(t.changelog for t in watch.tables)
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            await watch.check()

    app.task(streamapp_changelog_watch)
