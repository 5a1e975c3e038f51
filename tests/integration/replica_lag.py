"""Whether the workers' replicas (standbys and warmups) have caught up with their changelogs, from
each worker's ``/streamapp/assignment`` view and the broker's changelog ends now.

A worker measures its replicas' lag once a second, against the changelog ends it read then
(``replica_ends`` in the view). A lag measured before a test's last events reached a changelog
says nothing of them: it is 0 while the replica has not taken them yet (a CI run killed a worker
whose standby held offset 79 of ~2400 records, its lag 0 against ends 516 and 62 it had read
before the events came). So a lag counts only once the end it was measured against has reached
the broker's end for that partition, read after the test's events were processed.

The broker's end is read at the isolation level the app's own consumer reads at: under
``exactly_once`` it is the last stable offset (``read_committed``), under at-least-once the log's
end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

#: topic -> partition -> offsets (broker ends, or a lag a caught-up replica may still show).
Ends = Mapping[str, Mapping[int, int]]


def unsettled_replicas(
    views: Mapping[str, Mapping[str, Any]], ends: Ends, allowed: Ends | None = None
) -> list[str]:
    """Why the replicas of ``views`` (worker name -> its assignment view) are not all caught up,
    one line each; empty when they are.

    ``ends``: the broker's end now of every partition a view has a lag for. ``allowed``: a lag
    that still counts as caught up, by partition (0 where not given): under exactly_once a
    replica that applied every record is still behind the end by the commit marker after it.
    """
    return unmeasured_replicas(views) + [
        why for name, view in views.items() for why in _judged(name, view, ends, allowed or {})
    ]


def unmeasured_replicas(views: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The replicas with no lag in their worker's view: not measured since its assignment came,
    so nothing is known of them yet."""
    why: list[str] = []
    for name, view in views.items():
        lags: Mapping[str, Mapping[str, int]] = view["replica_lag"]
        for topic, partitions in sorted(_replicas(view).items()):
            missing = sorted(p for p in partitions if str(p) not in lags.get(topic, {}))
            if missing:
                why.append(f"{name}: no lag measured yet for {topic} {missing}")
    return why


def _judged(name: str, view: Mapping[str, Any], ends: Ends, allowed: Ends) -> list[str]:
    """Each lag of ``view`` that is stale (measured against an end short of the broker's) or
    beyond what is allowed."""
    measured: Mapping[str, Mapping[str, int]] = view["replica_ends"]
    why: list[str] = []
    for topic, by_partition in sorted(view["replica_lag"].items()):
        for key, lag in sorted(by_partition.items()):
            p = int(key)
            end = ends.get(topic, {}).get(p)
            measured_end = measured.get(topic, {}).get(key)
            gap = allowed.get(topic, {}).get(p, 0)
            if end is None:
                why.append(f"{name}: {topic}[{p}] has no broker end to judge its lag by")
            elif measured_end is None or measured_end < end:
                why.append(
                    f"{name}: {topic}[{p}] lag {lag} measured against end {measured_end}, "
                    f"the broker's is {end}"
                )
            elif lag > gap:
                why.append(f"{name}: {topic}[{p}] {lag} behind (end {end}, allowed {gap})")
    return why


def _replicas(view: Mapping[str, Any]) -> dict[str, set[int]]:
    """topic -> the partitions the worker replicates (standbys and warmups)."""
    replicas: dict[str, set[int]] = {}
    for held in (view["standby"], view["warmup"]):
        for topic, partitions in held.items():
            replicas.setdefault(topic, set()).update(partitions)
    return replicas


async def broker_ends(
    bootstrap: str, tps: Iterable[TopicPartition], isolation_level: str = "read_uncommitted"
) -> dict[str, dict[int, int]]:
    """topic -> partition -> the broker's end offset now, of ``tps`` (no consumer group)."""
    wanted = sorted(set(tps))
    if not wanted:
        return {}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation_level, enable_auto_commit=False
    )
    await consumer.start()
    try:
        ends: dict[str, dict[int, int]] = {}
        for tp, end in (await consumer.end_offsets(wanted)).items():
            ends.setdefault(tp.topic, {})[tp.partition] = end
        return ends
    finally:
        await consumer.stop()


def replicas_behind(
    bootstrap: str,
    views: Mapping[str, Mapping[str, Any]],
    isolation_level: str = "read_uncommitted",
) -> list[str]:
    """`unsettled_replicas` of ``views`` against the broker's ends read now, at the app's
    ``isolation_level``: call it once the test's events are processed. The broker is asked (one
    consumer start) only when every replica has a lag to judge."""
    unmeasured = unmeasured_replicas(views)
    if unmeasured:
        return unmeasured
    tps = [
        TopicPartition(topic, int(p))
        for view in views.values()
        for topic, by_partition in view["replica_lag"].items()
        for p in by_partition
    ]
    ends = asyncio.run(broker_ends(bootstrap, tps, isolation_level))
    return unsettled_replicas(views, ends)
