"""The eager hand-out's integration test app: counts per key, exactly_once, one output per event.

Each event of ``<app id>-events`` (raw key, any value) adds one to its key's count in the
changelog table ``counts`` and sends the key's new count to ``<app id>-counts``, in the same
transaction. ``GET /counts/`` serves this worker's counts and how its fetch loop handed records
out (at once, or having had to wait). The app id comes from ``EAGER_APP_ID``.
"""

from __future__ import annotations

import os
from typing import Any

from streamapp import App
from streamapp.joins._io import send_raw
from streamapp.runtime.consumer import Consumer

APP_ID = os.environ.get("EAGER_APP_ID", "it-eager")
PARTITIONS = 4

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    processing_guarantee="exactly_once",
    num_standby_replicas=0,
    broker_commit_interval=1.0,
)
events = app.topic(
    f"{APP_ID}-events",
    key_type=str,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=PARTITIONS,
)
OUTPUT = f"{APP_ID}-counts"
counts = app.Table("counts", default=int, partitions=PARTITIONS)


@app.agent(events)
async def count_events(stream: Any) -> None:
    async for event in stream.events():
        key = event.key
        counts[key] += 1
        # In the transaction of the event's partition, as streamapp's joins send (so would a
        # plain `output.send`: docs/concepts.md, "Exactly once: what an agent sends").
        await send_raw(app, event.message, OUTPUT, key.encode(), str(counts[key]).encode())


@app.page("/counts/")
async def get_counts(web: Any, request: Any) -> Any:
    consumer = app.consumer
    # The fetch loop hands every record out itself, without a task of its own.
    at_once = consumer.fetch_loop.handed_out if isinstance(consumer, Consumer) else 0
    waiting = 0
    return web.json(
        {"counts": dict(counts.items()), "handed_out_at_once": at_once, "waiting": waiting}
    )
