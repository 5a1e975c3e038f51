"""The cooperative-rebalance test's app: the rebalance tests' latest-value table, and a log of
when this worker starts and stops processing each event partition.

Each worker appends JSON lines to ``$COOP_LOG_DIR/<client id>.jsonl``: ``assigned`` (the event
partitions active after an assignment, sent once Faust has applied it, before recovery lets any
record through), ``revoked`` (the event partitions revoked, sent once Faust's revocation step has
stopped their processing), ``complete`` (the rebalance's recovery is over), ``paused`` (event
partitions the consumer pauses), ``seek_all`` (Faust seeking every partition back to its
committed offset) and one ``rec`` per processed event. The test reads those events only
in each worker's own order, and across workers on the machine's one wall clock.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from streamapp import App

APP_ID = os.environ.get("COOP_APP_ID", "it-coop")  # the upgrade test runs its own group
PARTITIONS = 6
TOPIC = f"{APP_ID}-events"
#: The overlap test's knobs (tests/integration/test_cooperative_overlap.py): each restore waits
#: this long before it starts (Faust's stream_recovery_delay), so that the next rebalance begins
#: while it is under way; the agent takes this long over each event, so that the streams' queues
#: hold records through the rebalances; and a rebalance's table step notes whether the restore
#: of the rebalance before is still under way, and when it is over.
RECOVERY_DELAY_S = float(os.environ.get("COOP_RECOVERY_DELAY_S", "0"))
EVENT_DELAY_S = float(os.environ.get("COOP_EVENT_DELAY_S", "0"))
HOLD_TABLE_STEP = os.environ.get("COOP_HOLD_TABLE_STEP") == "1"
#: The queue-clear test's knob (tests/integration/test_queue_clear.py): as each rebalance
#: assigns it partitions it already had, the worker empties its streams' queues (Faust's flow
#: control, while the flow runs on), as a path that clears a kept partition's queue would, and
#: logs ``cleared`` with how many events the queues held.
CLEAR_KEPT_QUEUES = os.environ.get("COOP_CLEAR_KEPT_QUEUES") == "1"

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    acceptable_recovery_lag=300,
    probing_rebalance_interval_s=5.0,
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
    broker_rebalance_timeout=30.0,
    broker_commit_every=500,
    broker_commit_interval=1.0,
    **({"stream_recovery_delay": RECOVERY_DELAY_S} if RECOVERY_DELAY_S else {}),
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
_log: Any = None


def _write(entry: dict[str, Any]) -> None:
    global _log
    if _log is None:
        client = app.streamapp_settings.client_id  # type: ignore[attr-defined]
        _log = (Path(os.environ["COOP_LOG_DIR"]) / f"{client}.jsonl").open("a", buffering=1)
    _log.write(json.dumps({**entry, "t": time.time()}) + "\n")


def _events(tps: Any) -> list[int]:
    return sorted(tp.partition for tp in tps if tp.topic == TOPIC)


def _watch_consumer() -> None:
    """Log every pause of event partitions and every seek of all of them back to their
    committed offsets (Faust's ``perform_seek``), wrapping the consumer's public methods."""
    consumer = app.consumer
    if getattr(consumer, "_coop_watched", False):
        return
    consumer._coop_watched = True
    pause, perform_seek = consumer.pause_partitions, consumer.perform_seek

    def pause_partitions(tps: Any) -> None:
        tps = set(tps)
        if _events(tps):
            _write({"ev": "paused", "p": _events(tps)})
        pause(tps)

    async def seek_all() -> None:
        _write({"ev": "seek_all"})
        await perform_seek()

    consumer.pause_partitions = pause_partitions
    consumer.perform_seek = seek_all


@app.on_partitions_revoked.connect
async def _revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
    _watch_consumer()  # the first rebalance: before any later pause or seek
    _write({"ev": "revoked", "p": _events(revoked)})


@app.on_rebalance_complete.connect
async def _complete(sender: Any, **kwargs: Any) -> None:
    _write({"ev": "complete"})


_had: set[int] = set()
_queues: list[Any] = []


@app.on_partitions_assigned.connect
async def _assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
    actives = app.assignor.assigned_actives()
    _write({"ev": "assigned", "p": sorted(tp.partition for tp in actives if tp.topic == TOPIC)})
    kept = _had & set(_events(assigned))
    _had.clear()
    _had.update(_events(assigned))
    if CLEAR_KEPT_QUEUES and kept:
        queued = sum(queue.qsize() for queue in _queues)
        app.flow_control.clear()
        _write({"ev": "cleared", "p": sorted(kept), "queued": queued})


@app.agent(events)
async def keep_latest(stream: Any) -> None:
    _queues.append(stream.channel.queue)
    # The queue-clear test needs records waiting in the queue as a rebalance empties it: a
    # stream acked by hand takes them off one at a time (Faust's iteration), where an agent's
    # own stream takes what the queue holds in one run.
    source = stream.noack() if CLEAR_KEPT_QUEUES else stream
    async for event in source.events():
        latest[event.key] = int(event.value)
        _write({"ev": "rec", "p": event.message.partition, "o": event.message.offset})
        if EVENT_DELAY_S:
            await asyncio.sleep(EVENT_DELAY_S)
        if CLEAR_KEPT_QUEUES:
            event.ack()


_overlapped = [False]


async def _table_step_noting_a_restore_under_way(*args: Any, **kwargs: Any) -> None:
    """The table's rebalance step, noting ``held`` when the restore of the rebalance before is
    still under way (this rebalance's partitions join it), and ``pass_over`` once that restore
    completes, after this rebalance began."""
    if app.tables.recovery.in_recovery:  # type: ignore[attr-defined]
        _write({"ev": "held"})
        _overlapped[0] = True
    await _table_step(*args, **kwargs)


@app.on_rebalance_complete.connect
async def _restore_over(sender: Any, **kwargs: Any) -> None:
    if _overlapped[0]:
        _overlapped[0] = False
        _write({"ev": "pass_over"})


_table_step = latest.on_rebalance
if HOLD_TABLE_STEP:
    latest.on_rebalance = _table_step_noting_a_restore_under_way  # type: ignore[method-assign]


@app.page("/latest/")
async def get_latest(web: Any, request: Any) -> Any:
    return web.json(dict(latest.items()))
