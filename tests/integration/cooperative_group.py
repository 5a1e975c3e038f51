"""What the cooperative-protocol tests share: a group of `streamapp worker` processes of one app,
started under a rebalance protocol, fed keyed events, and the checks on the processing logs
their apps write (one JSON entry a line: ``assigned``/``revoked`` with partitions ``p``, ``rec``
with partition ``p`` and offset ``o``; each with its time ``t``)."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections.abc import Callable, Container, Hashable, Iterable, Mapping
from pathlib import Path
from typing import Any, Self

from streamapp.testing.kafka_io import partition_ends, produce
from streamapp.testing.worker import WorkerProcess

from .workers import merged_table

Entry = dict[str, Any]
Span = tuple[float, float]


class WorkerGroup:
    """Workers of one app, by name, and what was produced to its events topic: ``expected``
    holds the latest event (its sequence number) of every key. As a context manager, it stops
    the workers still running on the way out."""

    def __init__(self, app: str, bootstrap: str, root: Path, topic: str, key: Callable[[int], str]):
        self.app = app
        self.bootstrap = bootstrap
        self.root = root
        self.topic = topic
        self.key = key
        self.workers: dict[str, WorkerProcess] = {}
        self.expected: dict[str, int] = {}
        self.produced = 0

    def start_worker(
        self,
        name: str,
        /,
        env: Mapping[str, str],
        protocol: str | None = "cooperative",
        **options: Any,
    ) -> WorkerProcess:
        """Start worker ``name`` on its data dir under ``root``, as client id ``name``
        (``options``: WorkerProcess's own). ``protocol`` None starts it on streamapp's default
        protocol: no option, and no ``STREAMAPP_REBALANCE_PROTOCOL`` from this process's
        environment (an empty variable is "not given")."""
        if protocol is None:
            chosen: tuple[str, ...] = ()
            env = {**env, "STREAMAPP_REBALANCE_PROTOCOL": ""}
        else:
            chosen = ("--rebalance-protocol", protocol)
        worker = WorkerProcess(
            self.app,
            self.bootstrap,
            self.root / name,
            "--client-id",
            name,
            *chosen,
            env=env,
            **options,
        )
        self.workers[name] = worker.start()
        return worker

    def expect(self, seqs: range) -> None:
        self.expected.update({self.key(seq): seq for seq in seqs})

    def next_events(self, count: int) -> range:
        seqs = range(self.produced, self.produced + count)
        self.expect(seqs)
        self.produced += count
        return seqs

    def produce(self, count: int) -> None:
        asyncio.run(produce(self.bootstrap, self.topic, self.next_events(count), self.key))

    def view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.workers[name].get_json("/streamapp/assignment")
        return view

    def views(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        return {name: self.view(name) for name in (self.workers if names is None else names)}

    def assignment_settled(self, names: Iterable[str], partitions: int) -> bool:
        """Every partition of the events topic active on exactly one of ``names``, and each of
        them processing its current plan with no follow-up rebalance pending."""
        views = self.views(names)
        held = sorted(p for v in views.values() for p in v["active"].get(self.topic, []))
        if held != list(range(partitions)):
            return False
        for v in views.values():
            if v["followup_pending"] or not v["history"]:
                return False
            if v["history"][-1]["plan_generation"] != v["plan_generation"]:
                return False
        return True

    def table(self) -> dict[str, int]:
        """The apps' ``/latest/`` table, merged from every worker's active keys."""
        return merged_table(self.workers.values(), "/latest/")

    def stop_all(self) -> None:
        for worker in self.workers.values():
            if worker.alive():
                worker.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


def read_log(path: Path) -> list[Entry]:
    """A processing log's entries."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def spans_of(entries: list[Entry], ended: bool = False) -> dict[int, list[Span]]:
    """Partition -> the spans from an assignment that made it active to its revocation. A
    process that has stopped (``ended``) held what it still had until its last logged event:
    any record it processed later would show as a later event."""
    open_at: dict[int, float] = {}
    spans: dict[int, list[Span]] = {}
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


def check_one_owner_at_a_time(
    logs: Mapping[Hashable, list[Entry]], partitions: int, ended: Container[Hashable] = ()
) -> None:
    """No partition processed by two workers at once; every record a worker processed lies in
    one of its own spans of that partition (``ended``: the logs of processes that stopped)."""
    spans = {key: spans_of(entries, key in ended) for key, entries in logs.items()}
    for key, entries in logs.items():
        for e in entries:
            if e["ev"] == "rec":
                inside = spans[key].get(e["p"], [])
                assert any(a <= e["t"] <= b for a, b in inside), (key, e, inside)
    for p in range(partitions):
        owned = sorted((a, b, key) for key in spans for a, b in spans[key].get(p, []))
        for (a1, b1, k1), (a2, b2, k2) in itertools.pairwise(owned):
            assert b1 <= a2, f"partition {p}: {k1} {a1}..{b1} overlaps {k2} {a2}..{b2}"


def check_nothing_lost(group: WorkerGroup, logs: Iterable[list[Entry]]) -> None:
    """Every offset of the events topic processed at least once, and the table exact."""
    ends = asyncio.run(partition_ends(group.bootstrap, group.topic))
    processed: dict[int, set[int]] = {}
    for entries in logs:
        for e in entries:
            if e["ev"] == "rec":
                processed.setdefault(e["p"], set()).add(e["o"])
    for p, end in ends.items():
        missing = set(range(end)) - processed.get(p, set())
        assert not missing, (p, sorted(missing)[:10], len(missing))
    assert group.table() == group.expected
