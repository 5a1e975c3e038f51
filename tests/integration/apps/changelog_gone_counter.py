"""The deleted-changelog test's app: rogue_counter's counting app under its own app id (consumer
group) and topics, since that test deletes and recreates its changelog."""

from __future__ import annotations

from typing import Any

from streamapp import App

APP_ID = "it-changelog-gone"
PARTITIONS = 4
TOPIC = f"{APP_ID}-events"
CHANGELOG = f"{APP_ID}-counts-changelog"

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    # A member that leaves is noticed soon; rebalances settle in seconds.
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
    broker_rebalance_timeout=30.0,
    broker_commit_interval=1.0,
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
