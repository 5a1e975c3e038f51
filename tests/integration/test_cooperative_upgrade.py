"""A rolling upgrade from eager to cooperative (KIP-429) on a real broker, while records flow.

Three `streamapp worker` processes of tests/integration/apps/cooperative.py start with
``--rebalance-protocol eager``; each is then stopped (SIGTERM) and started again on its data dir
with ``--rebalance-protocol cooperative``, one at a time, while a producer keeps sending to every
partition. Checked from each worker process's own log of when it starts and stops processing
each partition, and from each worker's assignment history (``/streamapp/assignment``):

- nothing is lost, and the table is exact;
- no partition is ever processed by two worker processes at once;
- every plan made while an eager worker was in the group told the group to stay eager, and no
  worker kept its partitions through a rebalance until then; once the last worker was upgraded
  the group runs cooperative, and its workers keep their partitions through rebalances.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamapp.testing.kafka_io import create_topic, partition_ends, produce
from streamapp.testing.worker import WorkerProcess

from .workers import wait_for_workers

APP = "tests.integration.apps.cooperative:app"
APP_ID = "it-coop-upgrade"
TOPIC = f"{APP_ID}-events"
PARTITIONS = 6  # the app's
KEYS = 600
NAMES = ("w1", "w2", "w3")
#: What a worker logs when it keeps its partitions through a join (streamapp.faust_compat).
KEPT_LINE = "cooperative rebalance of group"


class Group:
    """The workers (one process per start), what they were sent, and what they must yield."""

    def __init__(self, bootstrap: str, root: Path) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.workers: dict[str, WorkerProcess] = {}
        #: (name, start number) -> that process's processing log
        self.logs: dict[tuple[str, int], Path] = {}
        self.stopped: set[tuple[str, int]] = set()
        self.starts: dict[str, int] = {}
        self.expected: dict[str, int] = {}
        self.produced = 0
        self._lock = threading.Lock()

    def start(self, name: str, protocol: str) -> None:
        start = self.starts.get(name, 0)
        self.starts[name] = start + 1
        log_dir = self.root / "processing" / f"{name}-{start}"
        log_dir.mkdir(parents=True)
        self.logs[(name, start)] = log_dir / f"{name}.jsonl"
        worker = WorkerProcess(
            APP,
            self.bootstrap,
            self.root / name,
            "--client-id",
            name,
            "--rebalance-protocol",
            protocol,
            env={"COOP_LOG_DIR": str(log_dir), "COOP_APP_ID": APP_ID},
            name=name,
        )
        self.workers[name] = worker.start()

    def stop(self, name: str) -> None:
        assert self.workers[name].stop() == 0, self.workers[name].log_tail()
        self.stopped.add((name, self.starts[name] - 1))

    def produce(self, count: int) -> None:
        with self._lock:
            seqs = range(self.produced, self.produced + count)
            asyncio.run(produce(self.bootstrap, TOPIC, seqs, _key))
            self.expected.update({_key(seq): seq for seq in seqs})
            self.produced += count

    def view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.workers[name].get_json("/streamapp/assignment")
        return view

    def views(self) -> dict[str, dict[str, Any]]:
        return {name: self.view(name) for name in self.workers}

    def settled(self) -> bool:
        """Every partition active exactly once, every worker processing its current plan."""
        views = self.views()
        held = sorted(p for v in views.values() for p in v["active"].get(TOPIC, []))
        if held != list(range(PARTITIONS)):
            return False
        for v in views.values():
            if v["followup_pending"] or not v["history"]:
                return False
            if v["history"][-1]["plan_generation"] != v["plan_generation"]:
                return False
        return True

    def table(self) -> dict[str, int]:
        merged: dict[str, int] = {}
        for worker in self.workers.values():
            part: dict[str, int] = worker.get_json("/latest/")
            assert not set(part) & set(merged), "a key is active on two workers"
            merged.update(part)
        return merged

    def wait(self, what: str, check: Any, timeout: float = 180.0) -> None:
        wait_for_workers(self.workers, what, check, timeout=timeout, log_lines=30)

    def entries(self, key: tuple[str, int]) -> list[dict[str, Any]]:
        path = self.logs[key]
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def worker_logs(self) -> str:
        return "".join(w.log_path.read_text(errors="replace") for w in self.workers.values())


class Producer:
    """Sends batches to every partition from a thread until stopped: records flow throughout."""

    def __init__(self, group: Group) -> None:
        self.group = group
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self.done.is_set():
                self.group.produce(60)
                self.done.wait(0.2)  # a steady stream, not a flood
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def __enter__(self) -> Producer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()
        assert self.error is None, self.error


def _key(seq: int) -> str:
    return f"k{seq % KEYS}"


def _spans(entries: list[dict[str, Any]], ended: bool) -> dict[int, list[tuple[float, float]]]:
    """Partition -> the spans from an assignment that made it active to its revocation. A
    process that has stopped (``ended``) held what it still had until its last logged event:
    any record it processed later would show as a later event."""
    open_at: dict[int, float] = {}
    spans: dict[int, list[tuple[float, float]]] = {}
    for e in entries:
        if e["ev"] == "assigned":
            for p in e["p"]:
                open_at.setdefault(p, e["t"])
            for p in set(open_at) - set(e["p"]):  # dropped without a revocation: ends here
                spans.setdefault(p, []).append((open_at.pop(p), e["t"]))
        elif e["ev"] == "revoked":
            for p in e["p"]:
                if p in open_at:
                    spans.setdefault(p, []).append((open_at.pop(p), e["t"]))
    last = entries[-1]["t"] if entries and ended else math.inf
    for p, start in open_at.items():
        spans.setdefault(p, []).append((start, last))
    return spans


def _protocols(histories: list[list[dict[str, Any]]]) -> set[tuple[int, str]]:
    return {(e["plan_generation"], e["group_protocol"]) for h in histories for e in h}


@pytest.fixture
def group(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Group]:
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    group = Group(kafka_bootstrap, tmp_path)
    try:
        yield group
    finally:
        for worker in group.workers.values():
            if worker.alive():
                worker.stop()


def test_a_rolling_upgrade_from_eager_to_cooperative_keeps_every_record_and_one_owner(
    group: Group,
) -> None:
    for name in NAMES:
        group.start(name, "eager")
    group.produce(3000)
    group.wait("three eager workers processing the first events", group.settled)

    seen_histories: list[list[dict[str, Any]]] = []
    with Producer(group):
        for name in NAMES:
            if name == NAMES[-1]:
                # The last eager worker is still in the group: every plan so far, on every
                # worker, told the group to stay eager, and no worker kept its partitions
                # through a rebalance.
                before_last = [v["history"] for v in group.views().values()] + seen_histories
                planned = _protocols(before_last)
                assert {protocol for _, protocol in planned} == {"eager"}, planned
                assert KEPT_LINE not in group.worker_logs()
                last_eager_plan = max(g for g, _ in planned)
            seen_histories.append(group.view(name)["history"])
            group.stop(name)
            group.start(name, "cooperative")
            group.wait(f"{name} back, upgraded, with the group settled", group.settled)

        # Every member speaks cooperative now: the group runs it, and plans after the last
        # eager worker's last plan say so.
        def cooperative() -> bool:
            views = group.views()
            return group.settled() and all(
                v["history"][-1]["group_protocol"] == "cooperative" for v in views.values()
            )

        group.wait("the group running cooperative", cooperative)
        after = _protocols([v["history"] for v in group.views().values()])
        assert all(g > last_eager_plan for g, p in after if p == "cooperative"), after
        # ... and the rebalance the last worker rejoined in was one the others kept their
        # partitions through.
        assert KEPT_LINE in group.worker_logs()

    group.wait("every event processed", lambda: group.settled() and group.table() == group.expected)

    logs = {key: group.entries(key) for key in group.logs}
    spans = {key: _spans(entries, key in group.stopped) for key, entries in logs.items()}

    # No partition processed by two worker processes at once; every record a process handled
    # lies in one of its own spans of that partition.
    for key, entries in logs.items():
        for e in entries:
            if e["ev"] == "rec":
                inside = spans[key].get(e["p"], [])
                assert any(a <= e["t"] <= b for a, b in inside), (key, e, inside)
    for p in range(PARTITIONS):
        owned = sorted((a, b, key) for key in spans for a, b in spans[key].get(p, []))
        for (a1, b1, k1), (a2, b2, k2) in itertools.pairwise(owned):
            assert b1 <= a2, f"partition {p}: {k1} {a1}..{b1} overlaps {k2} {a2}..{b2}"

    # Nothing lost: every offset processed at least once, and the table exact.
    ends = asyncio.run(partition_ends(group.bootstrap, TOPIC))
    processed: dict[int, set[int]] = {}
    for entries in logs.values():
        for e in entries:
            if e["ev"] == "rec":
                processed.setdefault(e["p"], set()).add(e["o"])
    for p, end in ends.items():
        missing = set(range(end)) - processed.get(p, set())
        assert not missing, (p, sorted(missing)[:10], len(missing))
    assert group.table() == group.expected
