"""The cooperative-rebalance test's app: the rebalance tests' latest-value table, and a log of
when this worker starts and stops processing each event partition.

Each worker appends JSON lines to ``$COOP_LOG_DIR/<client id>.jsonl``: ``assigned`` (the event
partitions active after an assignment, sent once Faust has applied it, before recovery lets any
record through), ``revoked`` (the event partitions revoked, sent once Faust's revocation step has
stopped their processing) and one ``rec`` per processed event. The test reads those events only
in each worker's own order, and across workers on the machine's one wall clock.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from streamapp import App

APP_ID = "it-coop"
PARTITIONS = 6
TOPIC = f"{APP_ID}-events"

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    acceptable_recovery_lag=300,
    probing_rebalance_interval_s=5.0,
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
    broker_rebalance_timeout=30.0,
    broker_commit_every=500,
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
_log: Any = None


def _write(entry: dict[str, Any]) -> None:
    global _log
    if _log is None:
        client = app.streamapp_settings.client_id  # type: ignore[attr-defined]
        _log = (Path(os.environ["COOP_LOG_DIR"]) / f"{client}.jsonl").open("a", buffering=1)
    _log.write(json.dumps({**entry, "t": time.time()}) + "\n")


@app.on_partitions_revoked.connect
async def _revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
    _write({"ev": "revoked", "p": sorted(tp.partition for tp in revoked if tp.topic == TOPIC)})


@app.on_partitions_assigned.connect
async def _assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
    actives = app.assignor.assigned_actives()
    _write({"ev": "assigned", "p": sorted(tp.partition for tp in actives if tp.topic == TOPIC)})


@app.agent(events)
async def keep_latest(stream: Any) -> None:
    async for event in stream.events():
        latest[event.key] = int(event.value)
        _write({"ev": "rec", "p": event.message.partition, "o": event.message.offset})


@app.page("/latest/")
async def get_latest(web: Any, request: Any) -> Any:
    return web.json(dict(latest.items()))
