"""Bad records on every input of a join and an aggregate (tests/integration/test_bad_inputs.py).

Settings come from ``BADIN_*`` variables so that each run gets its own topics, group, guarantee
and bad-record policy. Every value is JSON with a ``ts`` (event time) where a source reads one:

* ``orders`` x ``payments``: an inner windowed join (within 1 s), output ``<id>-paid``;
* ``shipments`` enriched from ``customers``: a left stream-table join (latest value), output
  ``<id>-labelled``; the table topic's records carry no ``ts`` (the table reads none);
* ``sales``: their ``amount`` summed per store in tumbling 1 s windows, output ``<id>-totals``.
"""

from __future__ import annotations

import os
from typing import Any

from streamapp import App
from streamapp.aggregates import WindowedAggregate, Windows
from streamapp.joins import JoinWindow, Source, StreamTableJoin, WindowedJoin

APP_ID = os.environ.get("BADIN_APP_ID", "it-bad-inputs")
PARTITIONS = 2
WINDOW = JoinWindow.within(1_000, grace_ms=60_000)
TUMBLING = Windows.tumbling(1_000, grace_ms=60_000)

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    processing_guarantee=os.environ.get("BADIN_GUARANTEE", "at_least_once"),
    bad_record_policy=os.environ.get("BADIN_POLICY", "skip"),
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
    broker_commit_interval=1.0,
)
json_topic: dict[str, Any] = {
    "key_type": str,
    "key_serializer": "raw",
    "value_serializer": "json",
    "partitions": PARTITIONS,
}


def topic(name: str) -> Any:
    return app.topic(f"{APP_ID}-{name}", **json_topic)


def ts(value: Any) -> int:
    return int(value["ts"])


WindowedJoin(
    app,
    "paid",
    left=Source(topic("orders"), time_ms=ts),
    right=Source(topic("payments"), time_ms=ts),
    window=WINDOW,
    output=topic("paid"),
    to_value=lambda r: {"order": r.left["id"], "payment": r.right["id"]},
)
labelled = StreamTableJoin(
    app,
    "labelled",
    stream=Source(topic("shipments"), time_ms=ts),
    table=topic("customers"),
    kind="left",
    output=topic("labelled"),
    to_value=lambda r: {
        "shipment": r.value["id"],
        "customer": r.table_value["name"] if r.table_value else None,
    },
)
WindowedAggregate(
    app,
    "totals",
    source=Source(topic("sales"), time_ms=ts),
    windows=TUMBLING,
    initial=lambda: 0,
    fold=lambda total, sale: total + sale["amount"],
    output=topic("totals"),
)


@app.page("/bad-inputs/customers/")
async def get_customers(web: Any, request: Any) -> Any:
    # The table's keys held on this worker (its active partitions).
    return web.json({"keys": sum(1 for k in labelled.table if str(k).startswith("k/"))})
