"""A streamapp app for the damaged-state tests: counts events per key in a changelog table."""

from __future__ import annotations

import os
from typing import Any

from streamapp import App

PARTITIONS = 2
#: Each test runs its own app (topics, group) on the session's broker: the id comes from here.
APP_ID_ENV = "IT_DAMAGED_APP_ID"
APP_ID = os.environ.get(APP_ID_ENV, "it-damaged")
TABLE = "damaged-counts"


def source_topic(app_id: str) -> str:
    return f"{app_id}-events"


def changelog_topic(app_id: str) -> str:
    return f"{app_id}-{TABLE}-changelog"


app = App(APP_ID, topic_partitions=PARTITIONS)
events = app.topic(
    source_topic(APP_ID),
    key_type=str,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=PARTITIONS,
)
counts = app.Table(TABLE, default=int, partitions=PARTITIONS)


@app.agent(events)
async def count_events(stream: Any) -> None:
    async for key, _value in stream.items():
        counts[key] += 1


@app.page("/counts/")
async def get_counts(web: Any, request: Any) -> Any:
    # Only this worker's partitions; the tests run one worker, which holds them all.
    return web.json({key: value for key, value in counts.items()})
