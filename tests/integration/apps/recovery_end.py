"""The recovery-end tests' app: counts events per key in a changelog table; an event whose value
is ``delete`` deletes its key instead (a tombstone in the changelog).

An event whose value is ``hold`` is counted, then its agent waits while the file the
``IT_RECOVERY_END_HOLD_FILE`` variable names exists (logging ``HOLDING <key>`` once): its
write, and its changelog record, stay in a transaction that cannot commit until then, so a test
can kill the worker mid-transaction. The changelog record must be sent while the agent holds:
with that variable set the agent reads a stream it acks by hand, which Faust iterates, sending
each write's changelog record as it is made (an agent's own stream sends a run's changelog
records once the run's last record of the partition is processed, after the hold).

Each test runs its own app id (topics, group) on the session's broker, under the processing
guarantee it asks for, with the standby replicas it asks for (none unless it says), all from the
environment.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from streamapp import App

PARTITIONS = 2
APP_ID_ENV = "IT_RECOVERY_END_APP_ID"
GUARANTEE_ENV = "IT_RECOVERY_END_GUARANTEE"
STANDBYS_ENV = "IT_RECOVERY_END_STANDBYS"
HOLD_FILE_ENV = "IT_RECOVERY_END_HOLD_FILE"
APP_ID = os.environ.get(APP_ID_ENV, "it-recovery-end")
TABLE = "rec-counts"


def source_topic(app_id: str) -> str:
    return f"{app_id}-events"


def changelog_topic(app_id: str) -> str:
    return f"{app_id}-{TABLE}-changelog"


app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    processing_guarantee=os.environ.get(GUARANTEE_ENV, "exactly_once"),
    # One worker at a time in most of these tests: no standby to place.
    num_standby_replicas=int(os.environ.get(STANDBYS_ENV, "0")),
    broker_commit_interval=0.5,
)
events = app.topic(
    source_topic(APP_ID),
    key_type=str,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=PARTITIONS,
)
counts = app.Table(TABLE, default=int, partitions=PARTITIONS)
logger = logging.getLogger("recovery_end")


async def _hold(key: str) -> None:
    hold_file = os.environ.get(HOLD_FILE_ENV)
    if hold_file and os.path.exists(hold_file):
        logger.warning("HOLDING %s", key)
        while os.path.exists(hold_file):
            await asyncio.sleep(0.1)


@app.agent(events)
async def count_events(stream: Any) -> None:
    acked_by_hand = bool(os.environ.get(HOLD_FILE_ENV))
    source = stream.noack() if acked_by_hand else stream
    async for event in source.events():
        key, value = event.key, event.value
        if value == b"delete":
            if key in counts:
                del counts[key]
        else:
            counts[key] += 1
            if value == b"hold":
                await _hold(key)
        if acked_by_hand:
            event.ack()


@app.page("/counts/")
async def get_counts(web: Any, request: Any) -> Any:
    # Only the partitions active on this worker (Faust's items() of a rocksdb table).
    return web.json({key: value for key, value in counts.items()})
