"""A worker stopped cleanly: the worker holding its standbys takes its tasks over, and nothing is
replayed before they are processed again.

Real `streamapp worker` processes of the rebalance tests' app (tests/integration/apps/rebalance.py:
the latest value of every key, one standby per table partition) under the cooperative protocol,
three workers, twelve partitions. Fewer records are written than Faust's standby buffer holds
(1000 a table), so no replica's records have reached its store as w1 stops: what the survivors
report of their standbys as they rejoin comes from what recovery applied
(`standby.replica_offsets`). Reported from the stores alone, the standbys of w1's tasks looked a
whole partition behind, the leader found no member caught up on them, and placed them for
balance on members without their state, which replayed them in full (here w2 replayed 95
records of a partition w3 held the standby of; 822 records in a rolling-restart step of
``bench/rebalance.py``). Counted from each worker's own report of what it replayed at each
rebalance (its ``/streamapp/assignment`` history), never from timings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamapp.testing.kafka_io import create_topic, end_offsets
from tables.inventory import LocalStateInventory

from .cooperative_group import WorkerGroup
from .replica_lag import replicas_behind
from .workers import wait_for_workers

APP = "tests.integration.apps.rebalance:app"
APP_ID = "it-standby-takeover"
TOPIC = f"{APP_ID}-events"
CHANGELOG = f"{APP_ID}-latest-changelog"
PARTITIONS = 12
EVENTS = 1200  # 100 a partition: each worker's standbys take 400, under the buffer's 1000


class Group(WorkerGroup):
    def __init__(self, bootstrap: str, root: Path) -> None:
        super().__init__(APP, bootstrap, root, TOPIC, _key)
        self.seen: dict[str, int] = {}

    def start(self, name: str) -> None:
        env = {
            "REBALANCE_APP_ID": APP_ID,
            "REBALANCE_PARTITIONS": str(PARTITIONS),
            # A standby a few records behind is not caught up: the one that took everything is.
            "REBALANCE_ACCEPTABLE_LAG": "10",
        }
        self.start_worker(name, env=env)

    def settled(self) -> bool:
        return bool(
            self.assignment_settled(self.workers, PARTITIONS) and self.table() == self.expected
        )

    def standbys_caught_up(self) -> bool:
        # Against the changelog's ends now (call it once the events are processed): a lag of 0
        # measured before they reached the changelog says nothing of them.
        views = self.views()
        return all(v["standby"].get(CHANGELOG) for v in views.values()) and not replicas_behind(
            self.bootstrap, views
        )

    def wait(self, what: str, check: Any, timeout: float = 120.0) -> None:
        wait_for_workers(self.workers, what, check, timeout=timeout, log_lines=30)

    def replayed_since_mark(self, name: str) -> list[dict[str, Any]]:
        history: list[dict[str, Any]] = self.view(name)["history"]
        entries = history[self.seen.get(name, 0) :]
        self.seen[name] = len(history)
        return entries


def _key(seq: int) -> str:
    return f"k{seq}"


@pytest.fixture
def group(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Group]:
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    with Group(kafka_bootstrap, tmp_path) as group:
        yield group


def test_the_standbys_of_a_stopped_worker_take_its_tasks_without_a_replay(group: Group) -> None:
    for name in ("w1", "w2", "w3"):
        group.start(name)
    group.wait("three workers settled", group.settled)
    group.produce(EVENTS)
    group.wait("every event processed", group.settled)
    group.wait("every standby caught up", group.standbys_caught_up)
    views = group.views()
    w1_tasks = set(views["w1"]["active"][TOPIC])
    standby_of = {
        p: name
        for name in ("w2", "w3")
        for p in views[name]["standby"].get(CHANGELOG, [])
        if p in w1_tasks
    }
    assert set(standby_of) == w1_tasks, views  # one standby a task, on a survivor
    for name in ("w2", "w3"):
        group.replayed_since_mark(name)

    w1 = group.workers.pop("w1")
    w1_replicas = set(views["w1"]["standby"].get(CHANGELOG, []))
    w1.stop()
    # Its stores, active and standby alike, were written up to the changelogs' ends as it
    # stopped: back on its data dir, it would replay nothing.
    ends = {
        tp.partition: end
        for tp, end in asyncio.run(end_offsets(group.bootstrap, [CHANGELOG])).items()
    }
    on_disk = LocalStateInventory(w1.data_dir / "v1" / "tables", {"latest": CHANGELOG}).offsets()
    held = w1_tasks | w1_replicas
    assert {p: on_disk.get(CHANGELOG, {}).get(p) for p in held} == {p: ends[p] for p in held}
    group.wait("w2 and w3 holding w1's tasks", group.settled, timeout=180.0)
    assert group.table() == group.expected
    for name in ("w2", "w3"):
        for entry in group.replayed_since_mark(name):
            assert entry["records_replayed"] == 0, (name, entry, standby_of)
