"""A tiny streamapp app for integration tests: counts events per key in a changelog table."""

from __future__ import annotations

from typing import Any

from streamapp import App

PARTITIONS = 4

app = App("it-counter", topic_partitions=PARTITIONS)
events = app.topic(
    "it-counter-events",
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
    # Only this worker's partitions; the tests run one worker, which holds them all.
    return web.json({key: value for key, value in counts.items()})
