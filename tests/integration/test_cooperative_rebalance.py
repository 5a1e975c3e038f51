"""The cooperative protocol (KIP-429) on a real broker: real `streamapp worker` processes of
tests/integration/apps/cooperative.py, scaled out from two workers to three.

Checked from each worker's own log of when it starts and stops processing each partition (see
the app's docs): nothing is lost (every offset processed; the table exact), no partition is ever
processed by two workers at once, and a partition a worker keeps through the scale-out is never
revoked from it, nor paused, nor sought back, and none of its records is processed twice.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.partitioner import DefaultPartitioner

from streamapp.testing.kafka_io import create_topic, partition_ends, produce
from streamapp.testing.worker import WorkerProcess

from .workers import wait_for_workers

APP = "tests.integration.apps.cooperative:app"
TOPIC = "it-coop-events"
PARTITIONS = 6
KEYS = 600
CHANGELOG = "it-coop-latest-changelog"


class Group:
    def __init__(self, bootstrap: str, root: Path) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.logs = root / "processing"
        self.logs.mkdir()
        self.workers: dict[str, WorkerProcess] = {}
        self.expected: dict[str, int] = {}
        self.produced = 0

    def start(self, name: str) -> None:
        worker = WorkerProcess(
            APP,
            self.bootstrap,
            self.root / name,
            "--client-id",
            name,
            "--rebalance-protocol",
            "cooperative",
            env={"COOP_LOG_DIR": str(self.logs)},
        )
        self.workers[name] = worker.start()

    def produce(self, count: int) -> None:
        seqs = range(self.produced, self.produced + count)
        for seq in seqs:
            self.expected[_key(seq)] = seq
        asyncio.run(produce(self.bootstrap, TOPIC, seqs, _key))
        self.produced += count

    def view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.workers[name].get_json("/streamapp/assignment")
        return view

    def actives(self) -> dict[str, set[int]]:
        return {name: set(self.view(name)["active"].get(TOPIC, [])) for name in self.workers}

    def settled(self) -> bool:
        views = {name: self.view(name) for name in self.workers}
        held = sorted(p for v in views.values() for p in v["active"].get(TOPIC, []))
        if held != list(range(PARTITIONS)):
            return False
        for v in views.values():
            if v["followup_pending"] or not v["history"]:
                return False
            if v["history"][-1]["plan_generation"] != v["plan_generation"]:
                return False
        return self.table() == self.expected

    def table(self) -> dict[str, int]:
        merged: dict[str, int] = {}
        for worker in self.workers.values():
            part: dict[str, int] = worker.get_json("/latest/")
            assert not set(part) & set(merged), "a key is active on two workers"
            merged.update(part)
        return merged

    def wait(self, what: str, timeout: float = 120.0) -> None:
        wait_for_workers(
            self.workers, what, self.settled, timeout=timeout, details=self.diff, log_lines=20
        )

    def diff(self) -> str:
        """On a timeout, what kept `settled` false: the keys whose table value differs (and the
        partition each lies in, who holds it, the last offset each worker processed there), so
        a lost or stale update can be told from stuck processing without rerunning."""
        lines = [f"worker logs: {self.root}"]
        try:
            parts = {name: self.workers[name].get_json("/latest/") for name in self.workers}
            actives = self.actives()
        except OSError as exc:
            return f"{lines[0]}\nweb views not answering: {exc!r}"
        last: dict[tuple[str, int], int] = {}
        for name in self.workers:
            for e in self.log(name) if (self.logs / f"{name}.jsonl").exists() else []:
                if e["ev"] == "rec":
                    last[(name, e["p"])] = max(last.get((name, e["p"]), -1), e["o"])
        lines.append(f"actives: {actives}; last offset processed: {sorted(last.items())}")
        bad = []
        for key in sorted(set(self.expected) | {k for part in parts.values() for k in part}):
            got = {name: part[key] for name, part in parts.items() if key in part}
            if list(got.values()) != [self.expected.get(key)]:
                bad.append(
                    f"{key} (p{_partition(key)}): expected {self.expected.get(key)}, got {got}"
                )
        lines.append(f"{len(bad)} key(s) differ:")
        lines.extend(bad[:40])
        return "\n".join(lines)

    def log(self, name: str) -> list[dict[str, Any]]:
        path = self.logs / f"{name}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _key(seq: int) -> str:
    return f"k{seq % KEYS}"


def _partition(key: str) -> int:
    """The partition the producer's default partitioner (murmur2) sends ``key`` to."""
    return int(DefaultPartitioner()(key.encode(), list(range(PARTITIONS)), []))


Period = tuple[float, float]


def _periods(entries: list[dict[str, Any]]) -> dict[int, list[Period]]:
    """Partition -> the spans from an assignment that made it active to its revocation."""
    open_at: dict[int, float] = {}
    spans: dict[int, list[Period]] = {}
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
    for p, start in open_at.items():
        spans.setdefault(p, []).append((start, math.inf))
    return spans


@pytest.fixture(scope="module")
def group(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    group = Group(kafka_bootstrap, tmp_path_factory.mktemp("cooperative"))
    try:
        for name in ("w1", "w2"):
            group.start(name)
        group.produce(3000)
        group.wait("two workers processing the first events")
        yield group
    finally:
        for worker in group.workers.values():
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()


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
    spans = {name: _periods(entries) for name, entries in logs.items()}
    for name, entries in logs.items():
        for e in entries:
            if e["ev"] == "rec":
                inside = spans[name].get(e["p"], [])
                assert any(a <= e["t"] <= b for a, b in inside), (name, e, inside)
    for p in range(PARTITIONS):
        owned = sorted((a, b, name) for name in spans for a, b in spans[name].get(p, []))
        for (a1, b1, n1), (a2, b2, n2) in itertools.pairwise(owned):
            assert b1 <= a2, f"partition {p}: {n1} {a1}..{b1} overlaps {n2} {a2}..{b2}"

    # (1) Nothing lost: every offset processed at least once, and the table exact.
    ends = asyncio.run(partition_ends(group.bootstrap, TOPIC))
    seen: dict[int, set[int]] = {}
    for entries in logs.values():
        for e in entries:
            if e["ev"] == "rec":
                seen.setdefault(e["p"], set()).add(e["o"])
    for p, end in ends.items():
        missing = set(range(end)) - seen.get(p, set())
        assert not missing, (p, sorted(missing)[:10], len(missing))
    assert group.table() == group.expected
