"""exactly_once under the cooperative protocol, and a worker killed between its two rounds, on a
real broker: real `streamapp worker` processes of tests/integration/apps/cooperative_crash.py.

- A scale-out from two workers to three under exactly_once: the partitions that did not move
  were never revoked nor paused (each worker's own log of its rebalances, and the rebalance
  history of ``/streamapp/assignment``), the table is exact, and the output topic read with
  read_committed holds every event exactly once.
- A worker killed with SIGKILL between the two rounds of a cooperative rebalance: in the first
  round it gave partitions up (withheld from everyone for that round); it is killed as its log
  says so, before the follow-up round that hands them out has completed anywhere. Nothing is
  lost; under exactly_once nothing is duplicated either (output read with read_committed,
  counts exact).

Every wait is on content or on a log line, never on time.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from streamapp.testing.kafka_io import committed_records, create_topics, produce
from streamapp.testing.worker import WorkerProcess

from .apps.cooperative_crash import PARTITIONS
from .cooperative_group import WorkerGroup, read_log
from .workers import wait_for_workers

APP = "tests.integration.apps.cooperative_crash:app"
KEYS = 30
#: The start of each entry of a worker's log; an entry's lists of partitions are tables on the
#: lines after it (Faust's log formatter).
ENTRY = re.compile(r"^\[\d{4}-\d\d-\d\d [^\]]*\] \[\d+\] \[\w+\] ", re.MULTILINE)
#: `streamapp.runtime.group.cooperative`'s entry for the outcome of a cooperative join.
ROUND = re.compile(
    r"cooperative rebalance of group \S+ \(generation (?P<generation>\d+)\): kept \d+ "
    r"partition\(s\), giving up (?P<lost>.*), gaining (?P<gained>.*)",
    re.DOTALL,
)
#: `streamapp.runtime.rebalance`'s entry for the transactional producers it stops.
STOPPED = "transactional producers stopped for "


def key_of(seq: int) -> str:
    return f"k{seq % KEYS}"


class Group(WorkerGroup):
    """Workers of one app id (fresh topics for each test) and what was produced to it:
    ``expected`` counts the events of every key."""

    def __init__(self, bootstrap: str, root: Path, guarantee: str) -> None:
        self.guarantee = guarantee
        self.app_id = f"it-coop-crash-{guarantee[:3]}-{int(time.time() * 1000) % 10**8}"
        self.events, self.out = f"{self.app_id}-events", f"{self.app_id}-out"
        super().__init__(APP, bootstrap, root, self.events, key_of)
        asyncio.run(create_topics(bootstrap, {self.events: PARTITIONS, self.out: PARTITIONS}))
        self.logs = root / "processing"
        self.logs.mkdir()
        self.expected: Counter[str] = Counter()

    def start(self, name: str) -> WorkerProcess:
        env = {
            "COOP_CRASH_APP_ID": self.app_id,
            "COOP_CRASH_GUARANTEE": self.guarantee,
            "COOP_CRASH_LOG_DIR": str(self.logs),
        }
        return self.start_worker(name, env=env)

    def expect(self, seqs: range) -> None:
        self.expected.update(key_of(seq) for seq in seqs)

    def produce_in_background(self, count: int) -> threading.Thread:
        seqs = self.next_events(count)
        thread = threading.Thread(
            target=lambda: asyncio.run(produce(self.bootstrap, self.events, seqs, key_of))
        )
        thread.start()
        return thread

    def live(self) -> dict[str, WorkerProcess]:
        return {name: w for name, w in self.workers.items() if w.alive()}

    def actives(self) -> dict[str, set[int]]:
        return {name: set(self.view(name)["active"].get(self.events, [])) for name in self.live()}

    def output(self) -> Counter[int]:
        """How many times each event is in the output's committed records."""
        records = asyncio.run(committed_records(self.bootstrap, self.out, PARTITIONS))
        return Counter(int(r.value) for r in records)

    def counts(self) -> Counter[str]:
        merged: Counter[str] = Counter()
        for worker in self.live().values():
            merged.update(worker.get_json("/counts/"))
        return merged

    def settled(self) -> bool:
        """Every event partition active on one live worker, no rebalance pending, and every
        event in the output; under exactly_once the counts exact too."""
        if not self.assignment_settled(self.live(), PARTITIONS):
            return False
        if set(self.output()) != set(range(self.produced)):
            return False
        return self.guarantee != "exactly_once" or self.counts() == self.expected

    def wait(self, what: str, timeout: float = 180.0) -> None:
        wait_for_workers(self.live(), what, self.settled, timeout=timeout, log_lines=30)

    def log(self, name: str) -> list[dict[str, Any]]:
        return read_log(self.logs / f"{name}.jsonl")

    def log_text(self, name: str, start: int = 0, end: int | None = None) -> str:
        """The worker's log, from byte ``start`` to byte ``end``."""
        return self.workers[name].log_path.read_bytes()[start:end].decode(errors="replace")


def log_entries(text: str) -> list[str]:
    """A worker's log cut into its entries (each written at once, ending with a newline: the
    last is left out while it does not)."""
    starts = [m.start() for m in ENTRY.finditer(text)]
    if not starts:
        return []
    ends = [*starts[1:], len(text) if text.endswith("\n") else -1]
    return [text[a:b] for a, b in zip(starts, ends, strict=True) if b >= 0]


def rounds(text: str) -> list[re.Match[str]]:
    """The cooperative joins a worker's log reports (generation, lost, gained)."""
    return [m for e in log_entries(text) if (m := ROUND.search(e)) is not None]


def partitions_of(text: str, topic: str) -> set[int]:
    """The partitions of ``topic`` in a logged set of partitions: a table of Faust's log
    formatter (``| topic | {1, 3-5} |``), streamapp's one-line form (``topic 1, 3-5; other 2``,
    `streamapp.runtime.partitions_text`), or aiokafka TopicPartitions."""
    found: set[int] = set()
    listings = re.findall(rf"\|\s*{re.escape(topic)}\s*\|\s*\{{([\d, -]*)\}}\s*\|", text)
    listings += re.findall(rf"(?<![\w-]){re.escape(topic)} (\d+(?:-\d+)?(?:, \d+(?:-\d+)?)*)", text)
    for listed in listings:
        for item in listed.replace(",", " ").split():  # "1", or a range "3-5"
            first, _, last = item.partition("-")
            found |= set(range(int(first), int(last or first) + 1))
    found |= {int(p) for p in re.findall(rf"topic='{re.escape(topic)}', partition=(\d+)", text)}
    return found


@pytest.fixture
def two_workers(request: pytest.FixtureRequest, kafka_bootstrap: str, tmp_path: Path) -> Any:
    with Group(kafka_bootstrap, tmp_path, request.param) as group:
        for name in ("w1", "w2"):
            group.start(name)
        group.produce(600)
        group.wait("two workers processing the first events")
        yield group


@pytest.mark.parametrize("two_workers", ["exactly_once"], indirect=True)
def test_scale_out_under_exactly_once_leaves_what_stays_alone_and_outputs_each_event_once(
    two_workers: Group,
) -> None:
    group = two_workers
    before = group.actives()
    marks = {name: len(group.log(name)) for name in before}
    scaled_at = time.time()
    group.start("w3")
    producing = group.produce_in_background(3000)  # while w3 joins
    producing.join()
    group.wait("w3 to take its share and every event processed")
    after = group.actives()
    assert after["w3"], after

    for name, held in before.items():
        kept = held & after[name]
        assert kept, (name, before, after)
        text = group.log_text(name)
        # The group ran cooperative and the rebalances were handled incrementally.
        assert "cooperative rebalance of group" in text, name
        assert "incremental rebalance" in text, name
        since = group.log(name)[marks[name] :]
        revoked = [e for e in since if e["ev"] == "revoked"]
        assert revoked, name  # it went through the rebalances (Faust's revocation step ran)
        assert not [e for e in revoked if kept & set(e["p"])], (name, kept, revoked)
        paused = [e for e in since if e["ev"] == "paused" and kept & set(e["p"])]
        assert not paused, (name, kept, paused)
        # Every rebalance it resumed from since the scale-out had the kept partitions active.
        history = [h for h in group.view(name)["history"] if h["at"] >= scaled_at]
        assert history, name
        for entry in history:
            assert kept <= set(entry["active"].get(group.events, [])), (name, kept, entry)

    # The old workers stopped the transactional producers of what they gave up, never those
    # of a partition they kept.
    for name, held in before.items():
        kept = held & after[name]
        stopped = [e for e in log_entries(group.log_text(name)) if STOPPED in e]
        assert [e for e in stopped if partitions_of(e, group.events)], name
        assert not [e for e in stopped if partitions_of(e, group.events) & kept], stopped

    output = group.output()
    assert set(output) == set(range(group.produced))
    duplicated = sorted(v for v, n in output.items() if n > 1)
    assert not duplicated, duplicated[:10]
    assert group.counts() == group.expected


@pytest.mark.parametrize("two_workers", ["at_least_once", "exactly_once"], indirect=True)
def test_a_worker_killed_between_the_two_cooperative_rounds_loses_nothing(
    two_workers: Group,
) -> None:
    group = two_workers
    olds = dict(group.workers)
    offsets = {name: len(w.log_path.read_bytes()) for name, w in olds.items()}
    group.start("w3")
    producing = group.produce_in_background(4000)

    # The first round: a worker's log says it is giving up event partitions. It is killed at
    # once: the partitions it gave up are withheld from everyone until the follow-up round.
    victim, first = "", None
    deadline = time.monotonic() + 180
    while first is None:
        assert time.monotonic() < deadline, "no worker gave up an event partition"
        for name in olds:
            for match in rounds(group.log_text(name, offsets[name])):
                if partitions_of(match["lost"], group.events):
                    victim, first = name, match
                    break
            if first is not None:
                break
        else:
            time.sleep(0.01)
    olds[victim].kill()
    at_kill = {name: len(w.log_path.read_bytes()) for name, w in group.workers.items()}
    assert first is not None
    given_up = partitions_of(first["lost"], group.events)
    generation = int(first["generation"])
    producing.join()
    group.wait("the survivors to take every partition and process every event")

    # The kill fell between the two rounds: the victim never completed another join, and no
    # survivor had been handed what it gave up when it died; they were handed it afterwards.
    victim_after = group.log_text(victim, offsets[victim])
    generations = [int(m["generation"]) for m in rounds(victim_after)]
    assert max(generations) == generation, generations
    handed_after: set[int] = set()
    for name in group.live():
        for m in rounds(group.log_text(name, offsets.get(name, 0), at_kill[name])):
            assert not partitions_of(m["gained"], group.events) & given_up, (name, m[0])
        for m in rounds(group.log_text(name, at_kill[name])):
            handed_after |= partitions_of(m["gained"], group.events)
    assert given_up <= handed_after, (given_up, handed_after)

    # Nothing lost: every event in the output, every count at least its events'.
    output = group.output()
    assert set(output) == set(range(group.produced))
    counts = group.counts()
    assert all(counts[key] >= n for key, n in group.expected.items()), (counts, group.expected)
    if group.guarantee == "exactly_once":
        # ... and nothing duplicated.
        duplicated = sorted(v for v, n in output.items() if n > 1)
        assert not duplicated, duplicated[:10]
        assert counts == group.expected
