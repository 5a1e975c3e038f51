"""The static-membership tests' app: every event's key is unique, and a table keeps its value.

The table's final contents are exactly predictable whoever processed what, and however often
(Faust is at-least-once: a worker killed with SIGKILL leaves records the next owner processes
again, writing the same values): a key missing or holding another value is a record lost.
Each test gives its own app id (``STATIC_APP_ID``), so each has its own group and topics.
"""

from __future__ import annotations

import os
from typing import Any

from streamapp import App

APP_ID = os.environ.get("STATIC_APP_ID", "it-static")
PARTITIONS = 4
TOPIC = f"{APP_ID}-events"

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    # Far longer than a worker takes to restart, so that a restart within it is not in doubt,
    # and a hand-over that waited it out would be one the tests see (a member still in the
    # group after its worker exited, a survivor holding a dead worker's partitions).
    broker_session_timeout=30.0,
    broker_heartbeat_interval=1.0,
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
latest = app.Table("latest", default=int, partitions=PARTITIONS)


@app.agent(events)
async def keep_latest(stream: Any) -> None:
    async for key, value in stream.items():
        latest[key] = int(value)


@app.page("/latest/")
async def get_latest(web: Any, request: Any) -> Any:
    # Active partitions only (Faust's rocksdb store iterates the actives' databases).
    return web.json(dict(latest.items()))
