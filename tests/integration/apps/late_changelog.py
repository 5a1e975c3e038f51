"""The late-changelog test's app: a global table whose changelog the workers do not create.

Names (``<app id>-names``) set the latest value of their key in ``names``, a global table:
every worker holds every partition of its changelog, and learns what another worker wrote
only by reading it. Faust creates no topic here (``topic_allow_declare=False``): the test
creates the changelog itself once the workers have joined, which is what a worker meets when
Faust's own creation of the changelog, at startup, comes after the leader's metadata request.
``/names/`` answers with this worker's whole global table.
"""

from __future__ import annotations

import os
from typing import Any

from streamapp import App

APP_ID = os.environ.get("LATE_APP_ID", "it-late-changelog")
PARTITIONS = 2

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    topic_allow_declare=False,
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
    broker_rebalance_timeout=30.0,
    broker_commit_interval=1.0,
)
names_topic = app.topic(
    f"{APP_ID}-names",
    key_type=str,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=PARTITIONS,
)
names = app.GlobalTable("names", default=int, partitions=PARTITIONS)


@app.agent(names_topic)
async def keep_names(stream: Any) -> None:
    async for key, value in stream.items():
        names[key] = int(value)


@app.page("/names/")
async def get_names(web: Any, request: Any) -> Any:
    return web.json(dict(names.items()))
