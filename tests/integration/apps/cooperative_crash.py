"""The cooperative crash tests' app: counts per key, one output record per event, and a log of
when this worker starts and stops processing each event partition.

Each event of ``<app id>-events`` (raw key, the value a sequence number) adds one to its key's
count in the changelog table ``counts`` and is sent on, unchanged, to ``<app id>-out`` with a
plain ``Topic.send``: under exactly_once both are in the transaction of the event's partition.
``GET /counts/`` serves this worker's counts.

The app id comes from ``COOP_CRASH_APP_ID`` and the processing guarantee from
``COOP_CRASH_GUARANTEE`` (``at_least_once`` unless set). Each worker appends JSON lines to
``$COOP_CRASH_LOG_DIR/<client id>.jsonl``, as tests/integration/apps/cooperative.py does:
``assigned`` (event partitions active after an assignment), ``revoked`` (event partitions
revoked, once Faust's revocation step stopped their processing), ``paused`` (event partitions
the consumer pauses) and one ``rec`` per processed event.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from streamapp import App

APP_ID = os.environ.get("COOP_CRASH_APP_ID", "it-coop-crash")
PARTITIONS = 6

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    processing_guarantee=os.environ.get("COOP_CRASH_GUARANTEE", "at_least_once"),
    acceptable_recovery_lag=300,
    probing_rebalance_interval_s=5.0,
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
    broker_rebalance_timeout=30.0,
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
_log: Any = None


def _write(entry: dict[str, Any]) -> None:
    global _log
    if _log is None:
        client = app.streamapp_settings.client_id  # type: ignore[attr-defined]
        path = Path(os.environ["COOP_CRASH_LOG_DIR"]) / f"{client}.jsonl"
        _log = path.open("a", buffering=1)
    _log.write(json.dumps({**entry, "t": time.time()}) + "\n")


def _events(tps: Any) -> list[int]:
    return sorted(tp.partition for tp in tps if tp.topic == events.get_topic_name())


def _watch_pauses() -> None:
    """Log every pause of event partitions (wrapping the consumer's public method)."""
    consumer = app.consumer
    if getattr(consumer, "_coop_crash_watched", False):
        return
    consumer._coop_crash_watched = True
    pause = consumer.pause_partitions

    def pause_partitions(tps: Any) -> None:
        tps = set(tps)
        if _events(tps):
            _write({"ev": "paused", "p": _events(tps)})
        pause(tps)

    consumer.pause_partitions = pause_partitions


@app.on_partitions_revoked.connect
async def _revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
    _watch_pauses()  # the first rebalance: before any later pause
    _write({"ev": "revoked", "p": _events(revoked)})


@app.on_partitions_assigned.connect
async def _assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
    _write({"ev": "assigned", "p": _events(app.assignor.assigned_actives())})


@app.agent(events)
async def count_and_forward(stream: Any) -> None:
    async for event in stream.events():
        counts[event.key.decode()] += 1
        await out.send(key=event.key, value=event.value)
        _write({"ev": "rec", "p": event.message.partition, "o": event.message.offset})


@app.page("/counts/")
async def get_counts(web: Any, request: Any) -> Any:
    return web.json(dict(counts.items()))
