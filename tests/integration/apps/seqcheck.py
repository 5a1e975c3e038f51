"""An app that can tell stale state from fresh: every record names the record before it.

Each record is ``key -> "seq:prev"``: a global sequence number, and the sequence number of the
previous record sent for the same key (-1 for the first). The table keeps the highest ``seq``
seen per key. A record whose ``prev`` is above what the table holds for its key met state that
is missing a record the changelog has: the worker then processed against stale state. Under
at-least-once a replay only meets state that is *ahead* (``prev`` below what is held), which is
harmless here, so a flag always means lost state.

Under exactly_once (``SEQCHECK_GUARANTEE=exactly_once``) each record is processed once against
committed state, so what the table holds for its key is exactly its ``prev``: a ``prev`` below
it met state ahead of the committed input, a write that survived the transaction a crash
aborted (uncommitted state). That is flagged too, as ``AHEAD``.

Flags are logged as ``STALE <partition> <key> prev=<prev> held=<held>`` and ``AHEAD ...`` (read
from the workers' logs by the tests, which outlive a worker's restarts) and counted on
``/seqcheck/``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from streamapp import App

APP_ID = os.environ.get("SEQCHECK_APP_ID", "it-seqcheck")
PARTITIONS = int(os.environ.get("SEQCHECK_PARTITIONS", "8"))
TOPIC = f"{APP_ID}-events"
GUARANTEE = os.environ.get("SEQCHECK_GUARANTEE", "at_least_once")

logger = logging.getLogger("seqcheck")

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    num_standby_replicas=1,
    acceptable_recovery_lag=int(os.environ.get("SEQCHECK_ACCEPTABLE_LAG", "200")),
    probing_rebalance_interval_s=float(os.environ.get("SEQCHECK_PROBING_S", "5")),
    broker_session_timeout=10.0,
    broker_heartbeat_interval=1.0,
    broker_rebalance_timeout=30.0,
    broker_commit_every=500,
    broker_commit_interval=1.0,
    processing_guarantee=GUARANTEE,
)
events = app.topic(
    TOPIC,
    key_type=str,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=PARTITIONS,
)
latest = app.Table("latest", default=lambda: -1, partitions=PARTITIONS)
flagged = 0


@app.agent(events)
async def check_and_keep(stream: Any) -> None:
    global flagged
    async for event in stream.events():
        key = event.key
        seq, prev = (int(part) for part in event.value.decode().split(":"))
        held = latest[key]
        if prev > held:
            flagged += 1
            logger.warning(
                "STALE %d %s prev=%d held=%d seq=%d", event.message.partition, key, prev, held, seq
            )
        elif prev < held and GUARANTEE == "exactly_once":
            flagged += 1
            logger.warning(
                "AHEAD %d %s prev=%d held=%d seq=%d", event.message.partition, key, prev, held, seq
            )
        if seq > held:
            latest[key] = seq


@app.page("/seqcheck/")
async def get_seqcheck(web: Any, request: Any) -> Any:
    # Active partitions only (Faust's rocksdb store iterates the actives' databases).
    return web.json({"flagged": flagged, "latest": dict(latest.items())})
