"""The windowed-aggregate integration tests' app: clicks counted and summed per key and window.

Settings come from ``WINIT_*`` variables so that each test gets its own topics and group.
Clicks are JSON ``{"id", "ts", "n"}`` keyed by user; event time is ``ts``.

* ``counts``: a tumbling count (1 s windows, 500 ms grace), results to ``<id>-counts``;
* ``sums``: a hopping sum of ``n`` (1 s windows every 500 ms, 500 ms grace), results to
  ``<id>-sums``, late records dead-lettered to ``<id>-late``;
* with ``WINIT_FAUST_WINDOWED=1``, also a Faust windowed table (``app.Table(...).tumbling``)
  counting the same clicks by their Kafka timestamps, to see faust-streaming/faust #385 on a
  ``streamapp.App``: Faust expires it by the wall clock every ``WINIT_CLEANUP_S`` seconds.
"""

from __future__ import annotations

import os
from typing import Any

from streamapp import App
from streamapp.aggregates import Source, WindowedAggregate, Windows

APP_ID = os.environ.get("WINIT_APP_ID", "it-windows")
PARTITIONS = int(os.environ.get("WINIT_PARTITIONS", "4"))
TUMBLING = Windows.tumbling(1_000, grace_ms=500)
HOPPING = Windows.hopping(1_000, 500, grace_ms=500)

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    processing_guarantee=os.environ.get("WINIT_GUARANTEE", "at_least_once"),
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
    broker_commit_interval=1.0,
    table_cleanup_interval=float(os.environ.get("WINIT_CLEANUP_S", "3600")),
)

json_topic: dict[str, Any] = {
    "key_type": str,
    "key_serializer": "raw",
    "value_serializer": "json",
    "partitions": PARTITIONS,
}
clicks = app.topic(f"{APP_ID}-clicks", **json_topic)

counts = WindowedAggregate.count(
    app,
    "counts",
    source=Source(clicks, time_ms=lambda click: click["ts"]),
    windows=TUMBLING,
    partitions=PARTITIONS,
    output=app.topic(f"{APP_ID}-counts", **json_topic),
)
sums = WindowedAggregate(
    app,
    "sums",
    source=Source(clicks, time_ms=lambda click: click["ts"]),
    windows=HOPPING,
    partitions=PARTITIONS,
    initial=lambda: 0,
    fold=lambda total, click: total + click["n"],
    output=app.topic(f"{APP_ID}-sums", **json_topic),
    dead_letter_topic=f"{APP_ID}-late",
)


def _windows(aggregate: Any) -> dict[str, dict[str, Any]]:
    return {
        key: {str(start): value for start, value in held.items()}
        for key, held in aggregate.all_windows().items()
    }


@app.page("/windows/")
async def get_windows(web: Any, request: Any) -> Any:
    # This worker's partitions: every window it holds, and its late counts.
    return web.json(
        {
            "counts": _windows(counts),
            "sums": _windows(sums),
            "late": sums.late_counts(),
            "counts_late": counts.late_counts(),
        }
    )


if os.environ.get("WINIT_FAUST_WINDOWED", "0") == "1":
    faust_counts = (
        app.Table("faust-counts", default=int, partitions=PARTITIONS)
        .tumbling(1.0, expires=60.0)
        .relative_to_stream()
    )
    raw_clicks = app.topic(
        f"{APP_ID}-clicks",
        key_type=str,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=PARTITIONS,
    )

    # Keys this agent has counted, in memory: tells a test the agent got to a record.
    faust_seen: set[str] = set()

    @app.agent(raw_clicks, name="faust-windowed")
    async def count_in_faust_windows(stream: Any) -> None:
        async for key, _value in stream.items():
            faust_counts[key] += 1
            faust_seen.add(key)

    @app.page("/faust-windows/")
    async def get_faust_windows(web: Any, request: Any) -> Any:
        # The underlying table's keys, ``[key, [start, end]]`` per window still held (JSON
        # lists: a store key decoded as Faust decodes it).
        held = [[key, list(window)] for key, window in faust_counts.table]
        return web.json({"windows": held, "seen": sorted(faust_seen)})
