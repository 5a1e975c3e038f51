"""A windowed join, a temporal stream-table join and a session-window aggregate in one app: the
app of tests/integration/test_shop_crash.py, declared as docs/joins.md's complete example is.

Settings come from ``SHOP_*`` variables so that each run gets its own topics and group. Every
value is JSON with an ``id`` and a ``ts`` (event time):

* orders left-joined with their payments (200 ms before to 500 ms after), over batches;
* shipments labelled with their customer's name as of the shipment's time (a temporal join:
  the customers table keeps a day of history);
* sales summed per store in sessions (1 s of inactivity ends one; 2 s of grace), a sale
  delivered twice counted once (its ``id``), over batches.
"""

from __future__ import annotations

import os
from typing import Any

from streamapp import App
from streamapp.aggregates import WindowedAggregate, Windows
from streamapp.joins import JoinWindow, Source, StreamTableJoin, WindowedJoin

APP_ID = os.environ.get("SHOP_APP_ID", "it-shop")
PARTITIONS = 4
WINDOW = JoinWindow(before_ms=200, after_ms=500, grace_ms=2_000)
HISTORY_MS = 86_400_000
SESSIONS = Windows.session(1_000, grace_ms=2_000)

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    processing_guarantee=os.environ.get("SHOP_GUARANTEE", "exactly_once"),
    bad_record_policy="dead-letter",
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


def name_of(customer: Any) -> Any:
    return customer["name"] if customer else None


paid = WindowedJoin(
    app,
    "orders-payments",
    left=Source(topic("orders"), time_ms=ts),
    right=Source(topic("payments"), time_ms=ts),
    window=WINDOW,
    kind="left",
    output=topic("paid"),
    to_value=lambda r: {"order": r.left["id"], "payment": r.right["id"] if r.right else None},
    dead_letter_topic=f"{APP_ID}-orders-late",
    batch_records=100,
)
labelled = StreamTableJoin(
    app,
    "shipments-customers",
    stream=Source(topic("shipments"), time_ms=ts),
    table=Source(topic("customers"), time_ms=ts),
    history_ms=HISTORY_MS,
    kind="left",
    output=topic("labelled"),
    to_value=lambda r: {"shipment": r.value["id"], "customer": name_of(r.table_value)},
)
sessions = WindowedAggregate(
    app,
    "sales-sessions",
    source=Source(topic("sales"), time_ms=ts, id=lambda sale: sale["id"]),
    windows=SESSIONS,
    initial=lambda: 0,
    fold=lambda total, sale: total + sale["amount"],
    merge=lambda a, b: a + b,
    output=topic("sessions"),
    dead_letter_topic=f"{APP_ID}-sales-late",
    batch_records=100,
)


@app.page("/shop/customers/")
async def get_customers(web: Any, request: Any) -> Any:
    # The customers held on this worker (its active partitions of the table).
    return web.json({"keys": sum(1 for k in labelled.table if str(k).startswith("k/"))})
