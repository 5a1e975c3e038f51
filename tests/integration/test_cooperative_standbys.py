"""Standby replicas under the cooperative protocol, on a real broker: real `streamapp worker`
processes of the rebalance tests' app (tests/integration/apps/rebalance.py: the latest value of
every key, one standby per table partition). One of two workers is stopped while 20,000 events
are written, and comes back on its data dir.

Checked: the returning worker's replicas catch up and it gets its partitions back (the group
settles), every standby catches up with the events written after, and the table holds the last
value of every key. The follow-ups the returning worker asks for until its replicas catch up gain
it nothing, so its incremental rebalances ran no recovery: its replicas stayed paused (Faust's
table manager pauses every changelog partition as a rebalance begins and leaves the standbys to
the recovery that follows), or were resumed past records the fetch loop had dropped as that
pause came. They never caught up, the group asked for a follow-up every 2 s for good, and the
worker never got its partitions back (`streamapp.runtime.rebalance`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamapp.testing.kafka_io import create_topic

from .cooperative_group import WorkerGroup
from .replica_lag import replicas_behind
from .workers import wait_for_workers

APP = "tests.integration.apps.rebalance:app"
APP_ID = "it-coop-standbys"
TOPIC = f"{APP_ID}-events"
PARTITIONS = 6
KEYS = 600


class Group(WorkerGroup):
    def __init__(self, bootstrap: str, root: Path) -> None:
        super().__init__(APP, bootstrap, root, TOPIC, _key)

    def start(self, name: str) -> None:
        env = {
            "REBALANCE_APP_ID": APP_ID,
            "REBALANCE_PARTITIONS": str(PARTITIONS),
            # A warmup is caught up only within 10 records of its changelog's end, and the
            # follow-ups come every 2 s until it is.
            "REBALANCE_ACCEPTABLE_LAG": "10",
            "REBALANCE_PROBING_S": "2",
        }
        self.start_worker(name, env=env)

    def settled(self) -> bool:
        views = self.views()
        if len({v["generation"] for v in views.values()}) != 1:
            return False
        if any(v["followup_pending"] for v in views.values()):
            return False
        held = sorted(p for v in views.values() for p in v["active"].get(TOPIC, []))
        return held == list(range(PARTITIONS))

    def lags(self) -> dict[str, dict[str, Any]]:
        return {
            name: {"lag": v["replica_lag"], "measured against": v["replica_ends"]}
            for name, v in self.views().items()
        }

    def standbys_caught_up(self) -> bool:
        # Judged against the changelogs' ends now: a lag of 0 measured before the last events
        # reached the changelog says nothing of them.
        return not replicas_behind(self.bootstrap, self.views())

    def wrong_keys(self) -> dict[str, tuple[int | None, int]]:
        table: dict[str, int] = {}
        for worker in self.workers.values():
            table.update(worker.get_json("/latest/"))
        return {k: (table.get(k), v) for k, v in self.expected.items() if table.get(k) != v}

    def wait(self, what: str, check: Any, timeout: float = 120.0) -> None:
        wait_for_workers(
            self.workers, what, check, timeout=timeout, details=lambda: repr(self.lags())
        )


def _key(seq: int) -> str:
    return f"key-{seq % KEYS}"


@pytest.fixture
def group(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Group]:
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    with Group(kafka_bootstrap, tmp_path) as group:
        yield group


def test_standbys_and_warmups_keep_replicating_through_rebalances_that_gain_nothing(
    group: Group,
) -> None:
    for name in ("w1", "w2"):
        group.start(name)
    group.produce(3000)
    group.wait("two workers settled", group.settled)

    # w2 away while far more is written than its warmups may lag by: back, it gets warmups
    # first, and the follow-ups it asks for until they catch up gain it nothing.
    group.workers.pop("w2").stop()
    group.wait("w1 holding everything", group.settled)
    group.produce(20000)
    group.wait("w1 through what w2 missed", lambda: not group.wrong_keys(), timeout=180.0)
    group.start("w2")
    group.wait(
        "w2 back with its partitions",
        lambda: group.settled() and bool(group.views()["w2"]["active"].get(TOPIC)),
        timeout=180.0,
    )
    group.produce(1500)
    # Every standby of both workers replays what was written since: judged once the actives
    # have processed it (the table exact), so the changelogs' ends include it.
    group.wait("the table exact", lambda: not group.wrong_keys())
    group.wait("the standbys caught up", group.standbys_caught_up)
