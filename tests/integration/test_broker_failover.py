"""The broker that coordinates the group dies for 20 s, under both guarantees, on a cluster of 3.

Two real `streamapp worker` processes count events per key in a changelog table
(tests/integration/apps/failover_counter.py: topics and changelog with 3 replicas, 2 in sync),
while a producer writes events throughout (acks=all, idempotent: each event is written once).
The node that coordinates the workers' group is killed with SIGKILL (a crash: it also leads some
partitions, follows the others, and may coordinate transactions), stays down for 20 s, and is
started again. Then:

- no worker exits;
- nothing is lost: every event is counted; under exactly_once exactly once, in the table and in
  its changelog read with read_committed; under at-least-once at least once, and more only if
  a rebalance made a worker process records again;
- every partition is processed again once its leader moved: while the node is still down,
  each partition's count grows past what it was at the kill;
- each worker logs at most 5 lines from the kill until its log says the node accepts
  connections again, each naming the node and what is happening.

What the outage cost (how long each partition's count stood still, the lines each worker
logged) is printed (``-s`` shows it); docs/operations.md ("What a broker failure costs") quotes
it. Every wait is on content, never on time; the one sleep is the outage itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.partitioner import DefaultPartitioner

from streamapp.kafka import LocalKafkaCluster
from streamapp.testing.kafka_io import committed_records
from streamapp.testing.worker import VIEW_ERRORS, WorkerProcess

from .apps.failover_counter import APP_ID_ENV, GUARANTEE_ENV, PARTITIONS, REPLICAS
from .workers import wait_for_workers

APP = "tests.integration.apps.failover_counter:app"
KEYS = 24
#: Events a second, spread over the keys (and so over the partitions).
RATE = 40
OUTAGE_S = 20.0
#: The most a worker may log for the outage.
LOG_BUDGET = 5
#: streamapp's line as its clients' failures end (`streamapp.runtime.client_log`).
OUTAGE_ENDED = "the failures to reach Kafka broker"


def key_of(seq: int) -> str:
    return f"k{seq % KEYS}"


def partition_of(key: str) -> int:
    """The source partition of ``key``: the producer's default partitioner (murmur2)."""
    partitions = list(range(PARTITIONS))
    return int(DefaultPartitioner()(key.encode(), partitions, partitions))


class SteadyProducer:
    """Writes ``RATE`` events a second on a thread of its own until `stop`, idempotent with
    acks=all; ``delivered`` counts per key the events the cluster acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.delivered: Counter[str] = Counter()
        #: partition -> when each of its events was acknowledged (monotonic time).
        self.acked: dict[int, list[float]] = {}
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop writing, once every event written so far is acknowledged or failed."""
        self._stop.set()
        self._thread.join(timeout=180)
        assert not self._thread.is_alive(), "the producer did not stop"

    async def _run(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            enable_idempotence=True,
            # The cluster takes about 10 s to fence a dead node: a batch waits that long.
            request_timeout_ms=120_000,
        )
        await producer.start()
        try:
            for seq in itertools.count():
                if self._stop.is_set():
                    break
                key = key_of(seq)
                delivery = await producer.send(self.topic, key=key.encode(), value=b"x")
                delivery.add_done_callback(lambda done, key=key: self._delivered(done, key))
                await asyncio.sleep(1 / RATE)
            await producer.flush()
        finally:
            await producer.stop()

    def _delivered(self, delivery: asyncio.Future[object], key: str) -> None:
        error = delivery.exception() if not delivery.cancelled() else asyncio.CancelledError()
        if error is not None:
            self.failures.append(error)
        else:
            self.delivered[key] += 1
            self.acked.setdefault(partition_of(key), []).append(time.monotonic())


class Progress:
    """Each partition's count of processed events over time, read from the workers' table views
    every quarter of a second on a thread of its own."""

    def __init__(self, workers: list[WorkerProcess]) -> None:
        self.workers = workers
        #: partition -> [(monotonic time, events counted)], one entry per change.
        self.changes: dict[int, list[tuple[float, int]]] = {}
        self._stop = threading.Event()

    def table(self) -> dict[str, int]:
        """The table, from every worker's view (a key is served by one worker)."""
        table: dict[str, int] = {}
        for worker in self.workers:
            for key, count in worker.get_json("/counts/", timeout=2.0).items():
                table[key] = max(count, table.get(key, 0))
        return table

    def latest(self) -> dict[int, int]:
        """partition -> events counted, as last read."""
        # A list first: the watching thread may add partitions meanwhile.
        return {p: entries[-1][1] for p, entries in list(self.changes.items()) if entries}

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        thread = threading.Thread(target=self._watch, daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                table = self.table()
            except VIEW_ERRORS:
                table = {}
            counts = dict.fromkeys(range(PARTITIONS), 0) if table else {}
            for key, count in table.items():
                counts[partition_of(key)] += count
            now = time.monotonic()
            for partition, count in counts.items():
                entries = self.changes.setdefault(partition, [])
                if not entries or entries[-1][1] != count:
                    entries.append((now, count))
            time.sleep(0.25)

    def longest_stop(self, partition: int, since: float, until: float) -> float:
        """The longest time ``partition``'s count stood still between ``since`` and ``until``."""
        return longest_gap([t for t, _ in self.changes.get(partition, [])], since, until)


def longest_gap(times: list[float], since: float, until: float) -> float:
    """The longest time between two of ``times`` (or ``since`` and ``until``) in that span."""
    within = [t for t in times if since < t < until]
    return max(b - a for a, b in itertools.pairwise([since, *within, until]))


async def _create_source(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, replication_factor=REPLICAS)])
    finally:
        await admin.close()


async def _leaders(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (its leader, how many replicas it has); asked again while the node asked
    does not list the topic's partitions yet."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
        while not described["partitions"]:
            await asyncio.sleep(0.5)
            [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return {p["partition"]: (p["leader"], len(p["replicas"])) for p in described["partitions"]}


def _decoded_key(raw: bytes) -> str:
    """A changelog record's key: the table's key, JSON or raw as the table serializes it."""
    try:
        key = json.loads(raw)
    except ValueError:
        return raw.decode()
    return key if isinstance(key, str) else raw.decode()


def _committed_table(bootstrap: str, changelog: str) -> dict[str, int]:
    """The table as its changelog's committed records say: each key's last value."""
    table: dict[str, int] = {}
    for record in asyncio.run(committed_records(bootstrap, changelog, PARTITIONS)):
        assert record.key is not None and record.value is not None
        table[_decoded_key(record.key)] = int(json.loads(record.value))
    return table


def _log_from(worker: WorkerProcess, offset: int) -> list[str]:
    with worker.log_path.open("rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace").splitlines()


def _plan_generation(worker: WorkerProcess) -> int | None:
    view = worker.assignment()
    assert view is not None, worker.log_tail()
    return view["plan_generation"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_the_group_s_coordinator_dies_for_20_s_and_nothing_is_lost(
    kafka_cluster: LocalKafkaCluster, tmp_path: Path, guarantee: str
) -> None:
    bootstrap = kafka_cluster.bootstrap
    app_id = f"it-failover-{guarantee[:3]}-{uuid.uuid4().hex[:6]}"
    source, changelog = f"{app_id}-events", f"{app_id}-counts-changelog"
    asyncio.run(_create_source(bootstrap, source))
    env = {APP_ID_ENV: app_id, GUARANTEE_ENV: guarantee}
    workers = {
        name: WorkerProcess(APP, bootstrap, tmp_path / name, env=env) for name in ("w1", "w2")
    }
    progress = Progress(list(workers.values()))
    victim: int | None = None
    try:
        for worker in workers.values():
            worker.start()
        with SteadyProducer(bootstrap, source) as producer, progress.watching():
            #: The plan generations last seen, and each partition's count then.
            seen: list[tuple[dict[str, int | None], dict[int, int]]] = []

            def settled_and_processing() -> bool:
                """One plan, every partition active on one worker, no replica warming up, and
                every partition processed since this plan was first seen (a partition a worker
                gained resumes once its committed offset is read, after the plan's line)."""
                views = {name: w.assignment() for name, w in workers.items()}
                held = sorted(
                    p for v in views.values() if v for p in v["active"].get(changelog, [])
                )
                if held != list(range(PARTITIONS)) or not all(
                    v
                    and not v["warmup"]
                    and not v["followup_pending"]
                    and v["history"]
                    and v["history"][-1]["plan_generation"] == v["plan_generation"]
                    for v in views.values()
                ):
                    return False
                plans = {name: v["plan_generation"] for name, v in views.items() if v}
                if not seen or seen[-1][0] != plans:
                    seen.append((plans, progress.latest()))
                    return False
                since = seen[-1][1]
                return all(progress.latest().get(p, 0) > since.get(p, 0) for p in range(PARTITIONS))

            wait_for_workers(
                workers, "the group settled and processing", settled_and_processing, timeout=180
            )
            generations = {name: _plan_generation(w) for name, w in workers.items()}
            victim = asyncio.run(kafka_cluster.coordinator(app_id))
            address = kafka_cluster.nodes[victim].bootstrap
            leaders = asyncio.run(_leaders(bootstrap, source))
            # The app's topics are replicated as the cluster's: its changelog too (Faust creates
            # it with the app's topic_replication_factor).
            replicas = asyncio.run(_leaders(bootstrap, changelog))
            assert {n for _, n in [*leaders.values(), *replicas.values()]} == {REPLICAS}
            logs_at = {name: w.log_path.stat().st_size for name, w in workers.items()}
            at_kill = progress.latest()
            killed_at = time.monotonic()
            kafka_cluster.kill(victim)
            time.sleep(OUTAGE_S)
            processed_while_down = {p for p, n in progress.latest().items() if n > at_kill[p]}
            restarting_at = time.monotonic()
            kafka_cluster.restart(victim)
            restarted_at = time.monotonic()
            since_restart = progress.latest()
            wait_for_workers(
                workers,
                "every partition processing after the restart",
                lambda: all(progress.latest()[p] > since_restart[p] for p in range(PARTITIONS)),
                timeout=120,
            )
            wait_for_workers(
                workers,
                "each worker's line that the outage ended",
                lambda: all(
                    OUTAGE_ENDED in "\n".join(_log_from(w, logs_at[n])) for n, w in workers.items()
                ),
                timeout=120,
            )
            producer.stop()
            assert not producer.failures, producer.failures[:3]
            expected = dict(producer.delivered)
            wait_for_workers(
                workers,
                "every event counted",
                lambda: all(progress.table().get(key, 0) >= n for key, n in expected.items()),
                timeout=120,
            )
            if guarantee == "exactly_once":
                wait_for_workers(
                    workers,
                    "every count committed",
                    lambda: _committed_table(bootstrap, changelog) == expected,
                    timeout=120,
                )
        logs = {name: _log_from(w, logs_at[name]) for name, w in workers.items()}
        rebalanced = {
            name for name, w in workers.items() if _plan_generation(w) != generations[name]
        }
        table = progress.table()

        # What it cost, for docs/operations.md.
        stops = {
            p: (
                longest_gap(producer.acked.get(p, []), killed_at, restarting_at),
                progress.longest_stop(p, killed_at, restarting_at),
            )
            for p in range(PARTITIONS)
        }
        print(
            f"\n{guarantee}: node {victim} (the group's coordinator; leader of partitions "
            f"{sorted(p for p, (n, _) in leaders.items() if n == victim)}) down {OUTAGE_S:.0f} s, "
            f"restarted in {restarted_at - restarting_at:.1f} s; per partition, the longest "
            "time no write was acknowledged / its count stood still: "
            + ", ".join(f"{p}: {w:.1f} / {c:.1f} s" for p, (w, c) in stops.items())
            + f"; rebalanced: {sorted(rebalanced) or 'none'}; "
            f"over-counted: {sum(table.values()) - sum(expected.values())}"
        )
        for name, lines in logs.items():
            print(f"{guarantee} {name}: {len(lines)} line(s)")
            for line in lines:
                print(f"    {line}")

        for name, worker in workers.items():
            assert worker.alive(), f"{name} exited:\n{worker.log_tail()}"
        assert processed_while_down == set(range(PARTITIONS)), (processed_while_down, leaders)
        if guarantee == "exactly_once" or not rebalanced:
            # No rebalance, nothing processed twice (at-least-once too); under exactly_once
            # the committed changelog said so above.
            assert table == expected
        else:
            assert all(table.get(key, 0) >= n for key, n in expected.items()), (table, expected)
        for name, lines in logs.items():
            assert 0 < len(lines) <= LOG_BUDGET, (name, lines)
            for line in lines:  # by its address, or its id and address
                assert f"Kafka broker {address}" in line or f"node {victim} ({address})" in line, (
                    name,
                    line,
                )
            assert "cannot reach Kafka broker" in lines[0], (name, lines)
            assert OUTAGE_ENDED in lines[-1] and "accepts connections again" in lines[-1], (
                name,
                lines,
            )
    finally:
        for worker in workers.values():
            if worker.alive():
                worker.stop()
        if victim is not None:
            kafka_cluster.restart(victim)
