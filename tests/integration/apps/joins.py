"""The join integration tests' app: orders joined with payments, and orders enriched from customers.

Settings come from ``JOINIT_*`` variables so that each test gets its own topics and group.
Every value is JSON: orders ``{"id", "ts"}``, payments ``{"id", "ts"}``, customers ``{"name"}``.
"""

from __future__ import annotations

import os
from typing import Any

from streamapp import App
from streamapp.joins import JoinWindow, Source, StreamTableJoin, WindowedJoin

APP_ID = os.environ.get("JOINIT_APP_ID", "it-joins")
PARTITIONS = int(os.environ.get("JOINIT_PARTITIONS", "4"))
KIND = os.environ.get("JOINIT_KIND", "left")
GLOBAL = os.environ.get("JOINIT_GLOBAL", "0") == "1"
# Records per batch for both joins (docs/joins.md, "Over batches"); unset: record by record.
BATCH = int(os.environ["JOINIT_BATCH"]) if os.environ.get("JOINIT_BATCH") else None
WINDOW = JoinWindow(before_ms=200, after_ms=500, grace_ms=2_000)

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    processing_guarantee=os.environ.get("JOINIT_GUARANTEE", "at_least_once"),
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
orders = app.topic(f"{APP_ID}-orders", **json_topic)
payments = app.topic(f"{APP_ID}-payments", **json_topic)
paid = app.topic(f"{APP_ID}-paid", **json_topic)
late = f"{APP_ID}-late"

orders_payments = WindowedJoin(
    app,
    "orders-payments",
    left=Source(orders, time_ms=lambda order: order["ts"]),
    right=Source(payments, time_ms=lambda payment: payment["ts"]),
    window=WINDOW,
    kind=KIND,
    partitions=PARTITIONS,
    output=paid,
    to_value=lambda result: {
        "order": result.left["id"],
        "payment": result.right["id"] if result.right else None,
    },
    dead_letter_topic=late,
    batch_records=BATCH,
)

if os.environ.get("JOINIT_TABLE_JOIN", "0") == "1":
    shipments = app.topic(f"{APP_ID}-shipments", **json_topic)
    customers = app.topic(f"{APP_ID}-customers", **json_topic)
    labelled = app.topic(f"{APP_ID}-labelled", **json_topic)
    shipments_customers = StreamTableJoin(
        app,
        "shipments-customers",
        stream=shipments,
        table=customers,
        partitions=PARTITIONS,
        global_table=GLOBAL,
        kind="left",
        output=labelled,
        to_value=lambda result: {
            "shipment": result.value["id"],
            "customer": result.table_value["name"] if result.table_value else None,
        },
        batch_records=BATCH,
    )

    @app.page("/join/customers/")
    async def get_customers(web: Any, request: Any) -> Any:
        # This worker's view of the table: active partitions, or all of a global table.
        return web.json({"count": len(shipments_customers.table)})


@app.page("/join/late/")
async def get_late(web: Any, request: Any) -> Any:
    return web.json(orders_payments.late_counts())
