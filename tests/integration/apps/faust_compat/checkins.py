"""People checking in to and out of locations: a Faust app written from Faust's user guide.

It is Faust's own idioms, one app using each of them, as a user would write it:

* ``visits``: a ``Table`` with a default (``default=int``), checkins per person;
* ``present``: a ``SetTable`` of the people at each location (Faust's own example,
  ``table[location].add(user_id)``), fed through ``group_by`` (the stream repartitioned by
  location);
* ``whereabouts``: a ``GlobalTable``, each person's location ("" once they left), which every
  worker holds whole;
* ``per_10s`` (tumbling, ``relative_to_stream()``) and ``per_10min`` (hopping) windowed tables
  counting checkins per person; the agent reads them after each checkin with ``.current()``
  and ``.value()`` and sends what it read to another agent (``keep_readings``), which keeps it
  per checkin; a web view reads ``.now()``;
* ``Record`` models for the checkins, the readings and the headcount;
* a timer (on the leader) publishing the headcount per location, from the global table;
* ``app.page`` web views reading the tables, routed to the worker holding the key with
  ``app.table_route``, and Faust's in-memory page counter (``/processed/``).

Two settings keep stock Faust right on two workers: keys as JSON everywhere
(``key_serializer="json"``), the encoding by which ``table_route`` finds a key's worker, and
``recovery_buffer_size=1`` for the global table, as Faust's ``GlobalTable`` docstring advises.

The engine comes from ``FAUST_COMPAT_ENGINE`` (the suite sets it): ``streamapp`` (the migrated
app), ``faust-memory`` (stock Faust, its default store) or ``faust-rocksdb`` (stock Faust with
``store="rocksdb://"``). The migration changes one line, the ``App`` class; the rest is the same
source for all three. ``FAUST_COMPAT_APP_ID`` gives each run its own group and topics.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import faust

import streamapp

ENGINE = os.environ.get("FAUST_COMPAT_ENGINE", "faust-memory")
APP_ID = os.environ.get("FAUST_COMPAT_APP_ID", "it-faust-compat")
PARTITIONS = 4
TUMBLING_S = 10.0
HOPPING_S, HOPPING_STEP_S = 600.0, 120.0

# The migration's one line: ``faust.App`` becomes ``streamapp.App``.
App = streamapp.App if ENGINE == "streamapp" else faust.App
# Stock Faust keeps tables in memory unless told; one of its two runs is on RocksDB.
STORE: dict[str, Any] = {"store": "rocksdb://"} if ENGINE == "faust-rocksdb" else {}

app = App(
    APP_ID,
    topic_partitions=PARTITIONS,
    # A killed worker is noticed soon, and rebalances settle in seconds.
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
    broker_rebalance_timeout=30.0,
    broker_commit_interval=1.0,
    # Keys as JSON everywhere, as Faust's tables encode them: ``app.table_route`` finds a key's
    # worker by hashing the table's encoding of it, so topics whose keys Faust encodes ``raw``
    # (its default for topics) are partitioned apart from their tables' routes.
    key_serializer="json",
    **STORE,
)


class Checkin(faust.Record, serializer="json"):
    person: str
    location: str
    action: str  # "join" or "leave"
    seq: int


class WindowReading(faust.Record, serializer="json"):
    """What the windowed tables said for a person right after one checkin was counted."""

    person: str
    seq: int
    per_10s_current: int
    per_10s_value: int
    per_10min_current: int


class Headcount(faust.Record, serializer="json"):
    counts: dict[str, int]


checkins = app.topic(f"{APP_ID}-checkins", key_type=str, value_type=Checkin)
headcounts = app.topic(f"{APP_ID}-headcounts", key_type=str, value_type=Headcount)

visits = app.Table("visits", default=int)
present = app.SetTable("present")
# Faust's GlobalTable docstring: with several workers, run it with ``recovery_buffer_size=1``
# (without it, a worker stops reading the others' writes once its recovery ends).
whereabouts = app.GlobalTable("whereabouts", default=str, recovery_buffer_size=1)
per_10s = (
    app.Table("per-10s", default=int)
    .tumbling(TUMBLING_S, expires=timedelta(hours=1))
    .relative_to_stream()
)
per_10min = app.Table("per-10min", default=int).hopping(
    HOPPING_S, HOPPING_STEP_S, expires=timedelta(hours=1)
)
readings = app.Table("readings", default=dict)

# Checkins this worker has handled since it started, in memory only (Faust's page counter).
processed = [0]


@app.agent()
async def keep_readings(stream: Any) -> None:
    async for reading in stream:
        # A table's value is written back whole, so that the change reaches the changelog.
        readings[reading.person] = {
            **readings[reading.person],
            str(reading.seq): [
                reading.per_10s_current,
                reading.per_10s_value,
                reading.per_10min_current,
            ],
        }


@app.agent(checkins)
async def track_people(stream: Any) -> None:
    async for person, checkin in stream.items():
        visits[person] += 1
        whereabouts[person] = checkin.location if checkin.action == "join" else ""
        per_10s[person] += 1
        per_10min[person] += 1
        await keep_readings.send(
            key=person,
            value=WindowReading(
                person=person,
                seq=checkin.seq,
                per_10s_current=per_10s[person].current(),
                per_10s_value=per_10s[person].value(),
                per_10min_current=per_10min[person].current(),
            ),
        )
        processed[0] += 1


@app.agent(checkins)
async def track_locations(stream: Any) -> None:
    async for checkin in stream.group_by(Checkin.location, name="by-location"):
        if checkin.action == "join":
            present[checkin.location].add(checkin.person)
        else:
            present[checkin.location].discard(checkin.person)


@app.timer(interval=1.0, on_leader=True)
async def publish_headcount() -> None:
    counts = Counter(location for location in whereabouts.values() if location)
    await headcounts.send(key="all", value=Headcount(counts=dict(counts)))


@app.page("/processed/")
async def get_processed(web: Any, request: Any) -> Any:
    return web.json({"processed": processed[0]})


@app.page("/visits/{person}/")
@app.table_route(table=visits, match_info="person")
async def get_visits(web: Any, request: Any, person: str) -> Any:
    return web.json({"visits": visits[person]})


@app.page("/present/{location}/")
@app.table_route(table=present, match_info="location")
async def get_present(web: Any, request: Any, location: str) -> Any:
    return web.json({"present": sorted(present[location])})


@app.page("/whereabouts/")
async def get_whereabouts(web: Any, request: Any) -> Any:
    # A global table: every worker answers for every key.
    return web.json(dict(whereabouts.items()))


@app.page("/readings/{person}/")
@app.table_route(table=readings, match_info="person")
async def get_readings(web: Any, request: Any, person: str) -> Any:
    return web.json({"readings": readings[person]})


@app.page("/per-10min-now/{person}/")
@app.table_route(table=visits, match_info="person")
async def get_per_10min_now(web: Any, request: Any, person: str) -> Any:
    # The window of the wall clock: the clock read on each side says which window that was.
    before = time.time()
    now = per_10min[person].now()
    return web.json({"now": now, "clock": [before, time.time()]})
