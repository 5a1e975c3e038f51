"""The bad-record tests' app: sums JSON values per key in a changelog table.

Values are JSON objects ``{"n": <int>}``; a value that is not JSON cannot be decoded (Faust's
``ValueDecodeError``), and ``{"poison": true}`` decodes but makes the agent raise. The policy for
both comes from ``STREAMAPP_BAD_RECORD_POLICY`` (or ``--bad-record-policy``), as for any app.
"""

from __future__ import annotations

import os
from typing import Any

from streamapp import App

APP_ID = os.environ.get("BAD_RECORDS_APP_ID", "it-bad-records")
PARTITIONS = 4
TOPIC = f"{APP_ID}-events"

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    processing_guarantee=os.environ.get("BAD_RECORDS_GUARANTEE", "at_least_once"),
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
)
events = app.topic(
    TOPIC,
    key_type=str,
    key_serializer="raw",
    value_serializer="json",
    partitions=PARTITIONS,
)
sums = app.Table("sums", default=int, partitions=PARTITIONS)


class PoisonRecord(ValueError):
    """A record the agent refuses, though it decodes."""


@app.agent(events)
async def add_up(stream: Any) -> None:
    async for key, value in stream.items():
        if value.get("poison"):
            raise PoisonRecord(f"poison record for key {key}")
        sums[key] += value["n"]


@app.page("/sums/")
async def get_sums(web: Any, request: Any) -> Any:
    # This worker's active partitions only (Faust's rocksdb store iterates the actives).
    return web.json(dict(sums.items()))
