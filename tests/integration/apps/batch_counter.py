"""The batch agent's integration test app: counts per key in an agent over batches.

Each event of ``<app id>-events`` (key ``k<n>``, value its sequence number) adds one to its
key's count in the changelog table ``counts`` and sends ``<seq>:<new count>`` to
``<app id>-counts`` with a plain ``Topic.send`` (under exactly_once in the transaction of the
batch's partition, `streamapp.sending.sends`). The agent reads its stream with
`streamapp.batches.batches`. ``GET /counts/`` serves this worker's counts and the batches it
processed (how many, the largest) and the records handed out a partition at a time.
Environment: ``BATCH_APP_ID``, ``BATCH_GUARANTEE``.
"""

from __future__ import annotations

import os
from typing import Any

from streamapp import App
from streamapp.batches import batches
from streamapp.runtime.consumer import Consumer

APP_ID = os.environ.get("BATCH_APP_ID", "it-batch")
GUARANTEE = os.environ.get("BATCH_GUARANTEE", "exactly_once")
PARTITIONS = 4

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    processing_guarantee=GUARANTEE,
    num_standby_replicas=0,
    broker_commit_interval=1.0,
)
events = app.topic(
    f"{APP_ID}-events",
    key_type=str,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=PARTITIONS,
)
output = app.topic(
    f"{APP_ID}-counts",
    key_type=str,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=PARTITIONS,
)
counts = app.Table("counts", default=int, partitions=PARTITIONS)
processed = {"batches": 0, "largest": 0}


@app.agent(events)
async def count_events(stream: Any) -> None:
    async for batch in batches(stream, max_records=500):
        processed["batches"] += 1
        processed["largest"] = max(processed["largest"], len(batch))
        for key, value in batch.items():
            counts[key] += 1
            await output.send(key=key, value=b"%s:%d" % (value, counts[key]))


@app.page("/counts/")
async def get_counts(web: Any, request: Any) -> Any:
    consumer = app.consumer
    # Records the fetch loop handed out a partition at a time.
    by_partition = consumer.fetch_loop.handed_out if isinstance(consumer, Consumer) else 0
    return web.json({"counts": dict(counts.items()), "by_partition": by_partition, **processed})
