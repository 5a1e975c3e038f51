"""The queue-clear test's app (tests/integration/test_queue_clear.py): one event partition whose
records the agent counts per offset in a changelog table, and empties its own queue once while
the flow runs on, as a path that clears a kept partition's queue would (streamapp.runtime.flow).

As it reaches ``CLEAR_AT`` the agent waits until its queue holds at least ``QUEUED`` records
(all were produced before the worker started, so the fetch loop brings them), then clears the
app's flow control: the records queued behind it are dropped unprocessed. ``GET /seen/`` serves
the table (offset -> times processed) and how many records the clear dropped.
"""

from __future__ import annotations

import asyncio
from typing import Any

from streamapp import App

APP_ID = "it-queue-clear"
TOPIC = f"{APP_ID}-events"
#: The offset at which the agent clears its queue, and how many records must be queued then.
CLEAR_AT = 5
QUEUED = 40

app = App(APP_ID, topic_partitions=1, broker_commit_interval=1.0)
events = app.topic(
    TOPIC,
    key_type=str,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=1,
)
seen = app.Table("seen", default=int, partitions=1)
dropped: list[int] = []


@app.agent(events)
async def count_offsets(stream: Any) -> None:
    async for event in stream.events():
        offset = event.message.offset
        if offset == CLEAR_AT and not dropped:
            queue = stream.channel.queue
            while queue.qsize() < QUEUED:
                await asyncio.sleep(0.05)
            dropped.append(queue.qsize())
            app.flow_control.clear()
        seen[str(offset)] += 1


@app.page("/seen/")
async def get_seen(web: Any, request: Any) -> Any:
    return web.json({"seen": dict(seen.items()), "dropped": sum(dropped)})
