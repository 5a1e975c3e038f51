"""``bench/rebalance.py``'s app: the rebalance tests' app (``tests/integration/apps/rebalance.py``:
the latest value of every key in a changelog table) plus a steady stream of ticks.

The ticks topic has the events topic's partition count and the same subscriber, so partition
``p`` of both is one task (co-partitioned, under streamapp's grouper and Faust's alike): a tick
of partition ``p`` is processed exactly when the task's events could be, and stops when a
rebalance or a recovery stops the task. Each tick processed is one line of the worker's
processed log (`bench.lib.processed_log`) at ``REBALANCE_PROCESSED_LOG`` (none when unset).

Environment: the rebalance app's ``REBALANCE_*`` variables, and ``REBALANCE_PROCESSED_LOG``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bench.lib import processed_log
from tests.integration.apps.rebalance import APP_ID, PARTITIONS, app

__all__ = ["TICKS_TOPIC", "app"]

TICKS_TOPIC = f"{APP_ID}-ticks"
_LOG = os.environ.get("REBALANCE_PROCESSED_LOG")

ticks = app.topic(
    TICKS_TOPIC,
    key_type=bytes,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=PARTITIONS,
)


@app.agent(ticks)
async def note_ticks(stream: Any) -> None:
    log = processed_log.open_for_append(Path(_LOG)) if _LOG else None
    async for event in stream.events():
        if log is not None:
            message = event.message
            log.write(processed_log.line(message.partition, time.time(), message.timestamp))
