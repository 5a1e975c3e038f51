"""The revocation-commit test's app: counts events per key, and never commits on a timer.

Its periodic commit is an hour apart, so only the commit a revocation makes can carry what a
worker processed to the next owner of its partitions; without it, the next owner counts every
event again.
"""

from __future__ import annotations

from typing import Any

from streamapp import App

APP_ID = "it-revocation"
PARTITIONS = 4
TOPIC = f"{APP_ID}-events"

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    broker_commit_interval=3600.0,
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
)
events = app.topic(
    TOPIC,
    key_type=str,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=PARTITIONS,
)
counts = app.Table("counts", default=int, partitions=PARTITIONS)


@app.agent(events)
async def count_events(stream: Any) -> None:
    async for key, _value in stream.items():
        counts[key] += 1


@app.page("/counts/")
async def get_counts(web: Any, request: Any) -> Any:
    # Active partitions only (Faust's rocksdb store iterates the actives' databases).
    return web.json(dict(counts.items()))
