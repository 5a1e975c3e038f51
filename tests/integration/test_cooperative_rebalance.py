"""The cooperative protocol (KIP-429) on a real broker: real `streamapp worker` processes of
tests/integration/apps/cooperative.py, scaled out from two workers to three.

Checked from each worker's own log of when it starts and stops processing each partition (see
the app's docs): nothing is lost (every offset processed; the table exact), no partition is ever
processed by two workers at once, and a partition a worker keeps through the scale-out is never
revoked from it, nor paused, nor sought back, and none of its records is processed twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamapp.testing.kafka_io import create_topic

from .cooperative_group import WorkerGroup, check_nothing_lost, check_one_owner_at_a_time, read_log
from .workers import wait_for_workers

APP = "tests.integration.apps.cooperative:app"
TOPIC = "it-coop-events"
PARTITIONS = 6
KEYS = 600
CHANGELOG = "it-coop-latest-changelog"


class Group(WorkerGroup):
    def __init__(self, bootstrap: str, root: Path) -> None:
        super().__init__(APP, bootstrap, root, TOPIC, _key)
        self.logs = root / "processing"
        self.logs.mkdir()

    def start(self, name: str) -> None:
        self.start_worker(name, env={"COOP_LOG_DIR": str(self.logs)})

    def actives(self) -> dict[str, set[int]]:
        return {name: set(self.view(name)["active"].get(TOPIC, [])) for name in self.workers}

    def settled(self) -> bool:
        return self.assignment_settled(self.workers, PARTITIONS) and self.table() == self.expected

    def wait(self, what: str, timeout: float = 120.0) -> None:
        wait_for_workers(self.workers, what, self.settled, timeout=timeout, log_lines=20)

    def log(self, name: str) -> list[dict[str, Any]]:
        return read_log(self.logs / f"{name}.jsonl")


def _key(seq: int) -> str:
    return f"k{seq % KEYS}"


@pytest.fixture(scope="module")
def group(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    with Group(kafka_bootstrap, tmp_path_factory.mktemp("cooperative")) as group:
        for name in ("w1", "w2"):
            group.start(name)
        group.produce(3000)
        group.wait("two workers processing the first events")
        yield group


def test_scale_out_never_revokes_what_stays_and_never_doubles_a_partition(group: Group) -> None:
    before = group.actives()
    marks = {name: len(group.log(name)) for name in before}
    group.start("w3")
    group.produce(1500)  # while w3 joins
    group.wait("w3 to take its share")
    group.produce(600)
    group.wait("the last events processed")
    after = group.actives()
    assert after["w3"], after

    # (3) What a worker kept through the scale-out was never revoked from it: the group ran
    # cooperative (an eager member gives everything up at every rebalance).
    for name, held in before.items():
        kept = held & after[name]
        assert kept, (name, before, after)
        revoked = [e for e in group.log(name)[marks[name] :] if e["ev"] == "revoked"]
        assert revoked, name  # it went through the rebalances (Faust's revocation step ran)
        for e in revoked:
            assert not kept & set(e["p"]), (name, kept, e)
        assert "cooperative rebalance of group" in group.workers[name].log_path.read_text()

    # (4) What a worker kept flowed through the scale-out: never paused, never sought back to
    # its committed offset, and no record of it processed twice by anyone after the start.
    logs = {name: group.log(name) for name in group.workers}
    for name, held in before.items():
        kept = held & after[name]
        since = logs[name][marks[name] :]
        assert any(e["ev"] == "complete" for e in since), name  # it went through rebalances
        assert not [e for e in since if e["ev"] == "seek_all"], name
        paused = [e for e in since if e["ev"] == "paused" and kept & set(e["p"])]
        assert not paused, (name, kept, paused)
        assert "incremental rebalance" in group.workers[name].log_path.read_text()
    kept_anywhere = {p for name, held in before.items() for p in held & after[name]}
    processed: dict[tuple[int, int], int] = {}
    for name, entries in logs.items():
        for e in entries[marks.get(name, 0) :]:
            if e["ev"] == "rec" and e["p"] in kept_anywhere:
                processed[(e["p"], e["o"])] = processed.get((e["p"], e["o"]), 0) + 1
    twice = sorted(k for k, n in processed.items() if n > 1)
    assert not twice, twice[:10]

    # (2) No partition processed by two workers at once; every record a worker processed lies
    # in one of its own spans of that partition.
    logs = {name: group.log(name) for name in group.workers}
    check_one_owner_at_a_time(logs, PARTITIONS)

    # (1) Nothing lost: every offset processed at least once, and the table exact.
    check_nothing_lost(group, logs.values())
