"""The global-table replay tests' app: a keyed table and a `GlobalTable` that every worker holds.

Events (``<app id>-events``) set the latest value of their key in ``latest``, an ordinary table.
Settings (``<app id>-settings``) set the latest value of their key in ``settings``, a global
table: every worker holds every partition of its changelog, whichever worker wrote it. Both
pages answer with this worker's view: ``/latest/`` its active keys, ``/settings/`` the whole
global table. Each test gives its own app id (``GLOBAL_APP_ID``), so each has its own group and
topics.
"""

from __future__ import annotations

import os
from typing import Any

from streamapp import App

APP_ID = os.environ.get("GLOBAL_APP_ID", "it-global")
PARTITIONS = 4
SETTINGS_PARTITIONS = 2

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    # Far above a partition's changelog: a worker that comes back gets its partitions back at
    # once, not through warmups, so whatever its stores lack is replayed, and counted.
    acceptable_recovery_lag=100_000,
    probing_rebalance_interval_s=5.0,
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
    broker_rebalance_timeout=30.0,
    broker_commit_every=100,
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
settings_topic = app.topic(
    f"{APP_ID}-settings",
    key_type=str,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=SETTINGS_PARTITIONS,
)
latest = app.Table("latest", default=int, partitions=PARTITIONS)
settings = app.GlobalTable("settings", default=int, partitions=SETTINGS_PARTITIONS)


@app.agent(events)
async def keep_latest(stream: Any) -> None:
    async for key, value in stream.items():
        latest[key] = int(value)


@app.agent(settings_topic)
async def keep_settings(stream: Any) -> None:
    async for key, value in stream.items():
        settings[key] = int(value)


@app.page("/latest/")
async def get_latest(web: Any, request: Any) -> Any:
    return web.json(dict(latest.items()))


@app.page("/settings/")
async def get_settings(web: Any, request: Any) -> Any:
    return web.json(dict(settings.items()))


#: With this variable set to ``1``, the worker applies no changelog record of its first
#: rebalance's replay until its next rebalance begins: the fetch loop has records of that replay
#: in hand when the next rebalance lands, every time. For
#: tests/integration/test_rebalance_during_recovery.py.
HOLD_FIRST_REPLAY_ENV = "GLOBAL_HOLD_FIRST_REPLAY"
#: What the worker logs as the next rebalance releases the held replay.
RELEASED = "TEST ONLY: first replay released by the next rebalance"


def _hold_first_replay() -> None:
    import asyncio
    import logging

    tables: Any = app.tables
    apply_records, rebalance_start = tables.apply_records, tables.on_rebalance_start
    released = asyncio.Event()
    rebalances = [0]

    def on_rebalance_start() -> None:
        rebalances[0] += 1
        if rebalances[0] == 2:
            logging.getLogger(__name__).warning("streamapp: %s", RELEASED)
            released.set()
        rebalance_start()

    async def held_apply_records(*args: Any, **kwargs: Any) -> None:
        if rebalances[0] == 1:
            await released.wait()
        await apply_records(*args, **kwargs)

    tables.on_rebalance_start = on_rebalance_start
    tables.apply_records = held_apply_records


if os.environ.get(HOLD_FIRST_REPLAY_ENV) == "1":
    _hold_first_replay()
