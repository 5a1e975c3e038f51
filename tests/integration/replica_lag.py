"""Whether the workers' replicas (standbys and warmups) have caught up with their changelogs, from
each worker's ``/streamapp/assignment`` view and the broker's changelog ends now.

A worker measures its replicas' lag once a second, against the changelog ends it read then
(``replica_ends`` in the view). A lag measured before a test's last events reached a changelog
says nothing of them: it is 0 while the replica has not taken them yet (a CI run killed a worker
whose standby held offset 79 of ~2400 records, its lag 0 against ends 516 and 62 it had read
before the events came). So a lag counts only once the end it was measured against has reached
the broker's end for that partition, read after the test's events were processed.

`replicas_behind` reads the broker's ends as an at-least-once app's consumer does (the log's
end, `streamapp.testing.kafka_io.end_offsets`). Under ``exactly_once`` the end to judge by is
the last stable offset (``read_committed``), and a replica that applied every record is still
behind it by the commit marker: such a test reads both itself and hands them to
`unsettled_replicas` (see tests/integration/test_exactly_once_crash.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from streamapp.testing.kafka_io import end_offsets

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


def replicas_behind(bootstrap: str, views: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """`unsettled_replicas` of ``views`` against the broker's ends read now: call it once the
    test's events are processed. The broker is asked only when every replica has a lag to
    judge."""
    unmeasured = unmeasured_replicas(views)
    if unmeasured:
        return unmeasured
    topics = sorted({topic for view in views.values() for topic in view["replica_lag"]})
    ends: dict[str, dict[int, int]] = {}
    for tp, end in asyncio.run(end_offsets(bootstrap, topics)).items():
        ends.setdefault(tp.topic, {})[tp.partition] = end
    return unsettled_replicas(views, ends)
