"""An exactly_once app whose agent sends its output with a plain ``Topic.send``.

Each event of ``<app id>-events`` (raw key, the value a sequence number) adds one to its key's
count in the changelog table ``counts`` and is sent on, unchanged, to ``<app id>-out`` with
``await out.send(...)``: no streamapp helper, the way a user's agent sends. Under exactly_once
that send belongs to the transaction of the event's partition (`streamapp.sending.sends`).
``GET /counts/`` serves this worker's counts. The app id comes from ``EOS_SENDS_APP_ID``.
"""

from __future__ import annotations

import os
from typing import Any

from streamapp import App

APP_ID = os.environ.get("EOS_SENDS_APP_ID", "it-eos-sends")
PARTITIONS = 4

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    processing_guarantee="exactly_once",
    num_standby_replicas=0,
    broker_commit_interval=1.0,
)
RAW: dict[str, Any] = {
    "key_type": bytes,
    "value_type": bytes,
    "key_serializer": "raw",
    "value_serializer": "raw",
}
events = app.topic(f"{APP_ID}-events", partitions=PARTITIONS, **RAW)
out = app.topic(f"{APP_ID}-out", partitions=PARTITIONS, **RAW)
counts = app.Table("counts", default=int, partitions=PARTITIONS)


@app.agent(events)
async def forward(stream: Any) -> None:
    async for event in stream.events():
        counts[event.key.decode()] += 1
        await out.send(key=event.key, value=event.value)


@app.page("/counts/")
async def get_counts(web: Any, request: Any) -> Any:
    return web.json({"counts": dict(counts.items())})
