"""The counting app several integration tests run, each under its own app id (consumer group)
and topics: events per key (``<app id>-events``, raw keys and values) counted in a changelog
table ``counts``, served at ``GET /counts/``."""

from __future__ import annotations

from typing import Any

from streamapp import App

#: Rebalance settings for tests that add and remove members: a member that leaves is noticed
#: soon, and rebalances settle in seconds.
QUICK_REBALANCES: dict[str, Any] = {
    "broker_session_timeout": 8.0,
    "broker_heartbeat_interval": 1.0,
    "broker_rebalance_timeout": 30.0,
    "broker_commit_interval": 1.0,
}


def counting_app(app_id: str, partitions: int = 4, **settings: Any) -> App:
    """A `streamapp.App` counting ``<app_id>-events`` per key; ``settings`` go to the App."""
    app = App(app_id, topic_partitions=partitions, **settings)
    events = app.topic(
        f"{app_id}-events",
        key_type=str,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
    )
    counts = app.Table("counts", default=int, partitions=partitions)

    @app.agent(events)
    async def count_events(stream: Any) -> None:
        async for key, _value in stream.items():
            counts[key] += 1

    @app.page("/counts/")
    async def get_counts(web: Any, request: Any) -> Any:
        # Active partitions only (Faust's rocksdb store iterates the actives' databases).
        return web.json(dict(counts.items()))

    return app
