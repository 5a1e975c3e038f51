"""Ten SIGKILLs under exactly_once, with an app that tells stale and uncommitted state apart.

Three workers share 8 partitions (one standby each) of `apps.seqcheck` under exactly_once while
records keep arriving. Ten times, a worker is killed with SIGKILL mid-stream (its transactions
open, its stores holding only what committed) and started again on its data dir at once, then
the group settles before the next kill. Checked:

- no record ever meets state that misses an earlier record of its key (``STALE``) or that has
  seen a record its transaction never committed (``AHEAD``): each record is processed once,
  against committed state, through every kill;
- no store is ever discarded: each restart keeps its stores and replays their tails;
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
APP_ID = "it-seqcheck-eos"
TOPIC = f"{APP_ID}-events"
PARTITIONS = 8
WORKERS = ("w1", "w2", "w3")
KILLS = 10
KEYS = 2000
INITIAL_EVENTS = 4000
#: The steady stream through the kills: 5 records a second per partition.
STEADY_PER_SECOND = 40
#: How long each kill waits after the group settled: records flow, transactions are open.
BEFORE_KILL_S = 2.0
FLAGGED = re.compile(r"(?:STALE|AHEAD) (\d+) (\S+) prev=(-?\d+) held=(-?\d+)")
DISCARDING = "streamapp: discarding "
REPLAYED = re.compile(r"streamapp: processing resumed after [\d.]+ s, (\d+) changelog records")


class Group:
    def __init__(self, bootstrap: str, root: Path) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.workers: dict[str, WorkerProcess] = {}
        self.last_seq: dict[str, int] = {}
        self.produced = 0
        self._steady: threading.Thread | None = None
        self._stop_steady = threading.Event()
        self._producing = threading.Lock()

    def start(self, name: str) -> WorkerProcess:
        worker = self.workers.get(name) or WorkerProcess(
            APP, self.bootstrap, self.root / name, "--client-id", name
        )
        self.workers[name] = worker.start()
        return worker

    def view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.workers[name].get_json("/streamapp/assignment")
        return view

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

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 180.0) -> None:
        wait_for_workers(self.workers, what, check, timeout=timeout)

    def processing(self) -> bool:
        """Every partition active exactly once, every worker processing its assignment."""
        views = {name: self.view(name) for name in self.workers}
        held = sorted(p for v in views.values() for p in v["active"].get(TOPIC, []))
        if held != list(range(PARTITIONS)):
            return False
        return all(
            not v["followup_pending"]
            and bool(v["history"])
            and v["history"][-1]["plan_generation"] == v["plan_generation"]
            for v in views.values()
        )

    def table(self) -> dict[str, int]:
        return merged_table(self.workers.values(), "/seqcheck/", "latest")

    def settled(self) -> bool:
        if not self.processing():
            return False
        with self._producing:
            expected = dict(self.last_seq)
        return self.table() == expected

    def logs(self) -> str:
        return "\n".join(
            w.log_path.read_text(errors="replace")
            for w in self.workers.values()
            if w.log_path.exists()
        )


async def _send(bootstrap: str, records: list[tuple[str, str]]) -> None:
    # Idempotent: a retried send must not put a record in twice (a duplicate meets state that
    # has seen it, which this app flags under exactly_once).
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, enable_idempotence=True)
    await producer.start()
    try:
        for key, value in records:
            await producer.send(TOPIC, key=key.encode(), value=value.encode())
        await producer.flush()
    finally:
        await producer.stop()


@pytest.fixture
def group(kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Group]:
    monkeypatch.setenv("SEQCHECK_APP_ID", APP_ID)
    monkeypatch.setenv("SEQCHECK_GUARANTEE", "exactly_once")
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    group = Group(kafka_bootstrap, tmp_path)
    try:
        for name in WORKERS:
            group.start(name)
        group.wait("three workers sharing the work", group.processing)
        group.produce(INITIAL_EVENTS)
        group.wait("the initial records processed", group.settled)
        yield group
    finally:
        group.stop_steady_stream()
        for worker in group.workers.values():
            if worker.alive():
                worker.stop()


def test_ten_sigkills_under_exactly_once_meet_no_stale_or_uncommitted_state(group: Group) -> None:
    group.start_steady_stream(STEADY_PER_SECOND)
    replays: list[int] = []
    try:
        for kill in range(KILLS):
            name = WORKERS[kill % len(WORKERS)]
            victim = group.workers[name]
            log_from = victim.log_path.stat().st_size
            time.sleep(BEFORE_KILL_S)
            victim.kill()
            group.start(name)
            group.wait(f"{name} back after kill {kill + 1}", group.processing)
            log = _log_since(victim, log_from)
            assert DISCARDING not in log, log
            replays += [int(n) for n in REPLAYED.findall(log)]
    finally:
        group.stop_steady_stream()
    group.wait("the group to settle with every record processed", group.settled)
    logs = group.logs()
    assert [m.group(0) for m in FLAGGED.finditer(logs)] == []
    assert DISCARDING not in logs
    assert group.table() == group.last_seq
    # Every restart recovered from the stores it kept: it replayed their tails only. A store
    # rebuilt replays its partition's whole changelog, at least a record per initial event of
    # the partition.
    assert replays, "no restart said what it replayed"
    assert max(replays) < INITIAL_EVENTS // PARTITIONS, replays
    print(f"changelog records replayed per restart: {replays}")


def _log_since(worker: WorkerProcess, start: int) -> str:
    with worker.log_path.open("rb") as f:
        f.seek(start)
        return f.read().decode(errors="replace")
