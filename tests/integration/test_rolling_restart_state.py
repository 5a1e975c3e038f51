"""A rolling restart of 3 workers over 8 partitions, with an app that can tell stale state.

Each worker in turn is stopped with SIGTERM while ~100 records per partition are produced, and
restarted on its data dir and client id; the next stops a few seconds after the previous one is
back, so a returning worker's standbys are promoted while they are still catching up. Checked:

- no record ever meets state that misses an earlier record of its key (`apps.seqcheck`): a
  promoted standby's store holds every record its persisted offset claims;
- a returning worker gets exactly its own partitions back at its first assignment (8 partitions
  over 3 workers, plus Faust's leader topic: counts that do not divide evenly);
- the table's final content is exact.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from streamapp.testing.kafka_io import create_topic
from streamapp.testing.worker import WorkerProcess

from .workers import merged_table, wait_for_workers

APP = "tests.integration.apps.seqcheck:app"
APP_ID = "it-seqcheck"
TOPIC = f"{APP_ID}-events"
PARTITIONS = 8
KEYS = 2000
INITIAL_EVENTS = 8000
#: Written while a worker is away: about 100 per partition, within the acceptable lag (200).
AWAY_EVENTS = 800
#: How long after a returning worker resumed processing the next one stops.
PAUSE_BETWEEN_RESTARTS_S = 3.0
#: The steady stream through the restarts: 5 records a second per partition, so that with
#: the burst a returning worker's state stays within the acceptable lag (it gets its own back).
STEADY_PER_SECOND = 40
STALE = re.compile(r"STALE (\d+) (\S+) prev=(-?\d+) held=(-?\d+)")


class Group:
    def __init__(self, bootstrap: str, root: Path) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.workers: dict[str, WorkerProcess] = {}
        self.logs: list[Path] = []
        self.last_seq: dict[str, int] = {}
        self.produced = 0
        self._steady: threading.Thread | None = None
        self._stop_steady = threading.Event()
        self._producing = threading.Lock()

    def start(self, name: str) -> WorkerProcess:
        worker = WorkerProcess(APP, self.bootstrap, self.root / name, "--client-id", name)
        self.workers[name] = worker.start()
        if worker.log_path not in self.logs:
            self.logs.append(worker.log_path)
        return worker

    def view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.workers[name].get_json("/streamapp/assignment")
        return view

    def actives(self) -> dict[str, set[int]]:
        return {name: set(self.view(name)["active"].get(TOPIC, [])) for name in self.workers}

    def produce(self, count: int) -> None:
        # One sender at a time: a record must reach its partition after the one it names.
        with self._producing:
            records = []
            for seq in range(self.produced, self.produced + count):
                key = f"k{seq % KEYS}"
                records.append((key, f"{seq}:{self.last_seq.get(key, -1)}"))
                self.last_seq[key] = seq
            asyncio.run(_send(self.bootstrap, records))
            self.produced += count

    def start_steady_stream(self, per_second: int) -> None:
        """Produce ``per_second`` records a second in the background until `stop_steady_stream`.

        Records keep arriving through every stop, rebalance and restart, as in production: a
        standby is promoted while it is still reading what the active wrote a moment before.
        """
        self._stop_steady.clear()

        def run() -> None:
            while not self._stop_steady.wait(0.25):
                self.produce(per_second // 4)

        self._steady = threading.Thread(target=run, name="steady-stream", daemon=True)
        self._steady.start()

    def stop_steady_stream(self) -> None:
        self._stop_steady.set()
        if self._steady is not None:
            self._steady.join()
            self._steady = None

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 120.0) -> None:
        wait_for_workers(self.workers, what, check, timeout=timeout)

    def resumed(self, name: str) -> bool:
        """The worker's current assignment is processing."""
        v = self.view(name)
        return bool(v["history"]) and v["history"][-1]["plan_generation"] == v["plan_generation"]

    def table(self) -> dict[str, int]:
        return merged_table(self.workers.values(), "/seqcheck/", "latest")

    def settled(self) -> bool:
        views = {name: self.view(name) for name in self.workers}
        held = sorted(p for v in views.values() for p in v["active"].get(TOPIC, []))
        if held != list(range(PARTITIONS)):
            return False
        if any(v["followup_pending"] or not self.resumed(n) for n, v in views.items()):
            return False
        with self._producing:
            expected = dict(self.last_seq)
        return self.table() == expected

    def stale_records(self) -> list[str]:
        found = []
        for log in self.logs:
            found += [m.group(0) for m in STALE.finditer(log.read_text(errors="replace"))]
        return found


async def _send(bootstrap: str, records: list[tuple[str, str]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for key, value in records:
            await producer.send(TOPIC, key=key.encode(), value=value.encode())
        await producer.flush()
    finally:
        await producer.stop()


@pytest.fixture
def group(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Group]:
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    group = Group(kafka_bootstrap, tmp_path)
    try:
        for name in ("w1", "w2", "w3"):
            group.start(name)
        group.wait(
            "three workers sharing the work",
            lambda: all(group.actives().values()) and len(group.workers) == 3,
        )
        group.produce(INITIAL_EVENTS)
        group.wait("the initial records processed", group.settled)
        yield group
    finally:
        for worker in group.workers.values():
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()


def test_rolling_restart_promotes_standbys_with_every_record_and_returns_own_partitions(
    group: Group,
) -> None:
    group.start_steady_stream(STEADY_PER_SECOND)
    try:
        _rolling_restart(group)
    finally:
        group.stop_steady_stream()
    group.wait("the group to settle with every record processed", group.settled)
    assert group.stale_records() == []
    assert group.table() == group.last_seq


def _rolling_restart(group: Group) -> None:
    for name in sorted(group.workers):
        before = group.actives()[name]
        worker = group.workers.pop(name)
        assert worker.stop() == 0, worker.log_tail()
        group.wait(
            f"the others to cover for {name}",
            lambda: (
                sorted(p for ps in group.actives().values() for p in ps) == list(range(PARTITIONS))
            ),
        )
        group.produce(AWAY_EVENTS)
        group.start(name)
        group.wait(f"{name} back and processing", lambda name=name: _back(group, name))
        first = next(e for e in group.view(name)["history"] if e["active"].get(TOPIC))
        assert set(first["active"][TOPIC]) == before, (
            f"{name} held {sorted(before)} before its restart and came back with "
            f"{first['active'][TOPIC]}"
        )
        time.sleep(PAUSE_BETWEEN_RESTARTS_S)


def _back(group: Group, name: str) -> bool:
    v = group.view(name)
    return any(e["active"].get(TOPIC) for e in v["history"])
