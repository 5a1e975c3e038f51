"""The rebalance tests' and benchmark's app: the latest value of every key, in a changelog table.

Each event carries a per-key sequence number and the table keeps the latest, so replaying events
after a crash (Faust is at-least-once) writes the same values again: the table's final contents
are exactly predictable, whoever processed what.
"""

from __future__ import annotations

import os
from typing import Any

from streamapp import App

APP_ID = os.environ.get("REBALANCE_APP_ID", "it-rebalance")
PARTITIONS = int(os.environ.get("REBALANCE_PARTITIONS", "6"))
TOPIC = f"{APP_ID}-events"

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    # Far below a partition's changelog, so "caught up" means something in the tests.
    acceptable_recovery_lag=int(os.environ.get("REBALANCE_ACCEPTABLE_LAG", "300")),
    probing_rebalance_interval_s=float(os.environ.get("REBALANCE_PROBING_S", "5")),
    # A killed worker is noticed after the session timeout: keep it short for the tests.
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
    broker_rebalance_timeout=30.0,
    broker_commit_every=500,
    broker_commit_interval=1.0,
    # bench/rebalance.py --exactly-once
    processing_guarantee=os.environ.get("REBALANCE_GUARANTEE", "at_least_once"),
    # The benchmark's baseline runs the same app under stock Faust's assignor.
    **(
        {"PartitionAssignor": os.environ["REBALANCE_ASSIGNOR"]}
        if os.environ.get("REBALANCE_ASSIGNOR")
        else {}
    ),
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
    return web.json(
        {"count": len(latest), "sum": sum(latest.values())}
        if request.query.get("summary")
        else dict(latest.items())
    )
