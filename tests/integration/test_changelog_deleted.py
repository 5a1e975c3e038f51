"""A table's changelog topic deleted while two workers run, then created again with a
wrong partition count, then with the right one.

Each worker says in one line which changelog is wrong and how, and what to do; neither exits;
once the topic is right, stores beyond its (empty) end are rebuilt from it, and every event
produced after that is counted exactly. Counts of keys written before are not checked: the
deleted changelog took their history with it, and the table holds what the new one holds.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streamapp.testing.kafka_io import committed_records, create_topic, produce
from streamapp.testing.worker import WorkerProcess
from tests.integration.apps.changelog_gone_counter import CHANGELOG, PARTITIONS, TOPIC

from .workers import merged_table, wait_for_workers

APP = "tests.integration.apps.changelog_gone_counter:app"
MISSING = f"streamapp: changelog {CHANGELOG} of table counts is missing"
WRONG = f"streamapp: changelog {CHANGELOG} of table counts has 2 partitions instead of 4"
RIGHT = f"streamapp: changelog {CHANGELOG} of table counts is right again (4 partitions)"
#: aiokafka's line for a topic its metadata does not find, at ERROR. The worker consumer says it
#: at each of its metadata refreshes while the changelog is missing, and its producer, holding a
#: record for a partition that is gone, asks for metadata again every retry_backoff_ms
#: (streamapp.runtime.producer.refresh_spacing; aiokafka alone asks at once: 57 lines in 50 ms
#: in one run, a thousand a second in another). The changelog watch's one line says what is
#: wrong and what to do, so for a watched changelog these are DEBUG (streamapp.quiet_logs), not
#: in a worker's log at INFO.
NOT_FOUND = f"Topic {CHANGELOG} not found in cluster metadata"


async def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
        # Deletion completes asynchronously: wait until the topic is gone from the metadata.
        while topic in await admin.list_topics():
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def create_changelog(bootstrap: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(CHANGELOG, partitions, 1, topic_configs={"cleanup.policy": "compact"})]
        )
    finally:
        await admin.close()


class Counting:
    def __init__(self, bootstrap: str, root: Path) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.workers: dict[str, WorkerProcess] = {}
        self.expected: Counter[str] = Counter()
        self.produced = 0

    def start(self, name: str) -> None:
        worker = WorkerProcess(APP, self.bootstrap, self.root / name, "--client-id", name)
        self.workers[name] = worker.start()

    def wait(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        wait_for_workers(self.workers, what, check, timeout=timeout, log_lines=30)

    def actives(self, topic: str) -> list[int]:
        return sorted(
            p
            for w in self.workers.values()
            for p in w.get_json("/streamapp/assignment")["active"].get(topic, [])
        )

    def produce(self, count: int, prefix: str) -> None:
        seqs = range(self.produced, self.produced + count)
        self.expected.update(f"{prefix}{seq % 40}" for seq in seqs)
        asyncio.run(produce(self.bootstrap, TOPIC, seqs, lambda seq: f"{prefix}{seq % 40}"))
        self.produced += count

    def counts(self, prefix: str) -> dict[str, int]:
        merged = merged_table(self.workers.values(), "/counts/")
        return {k: n for k, n in merged.items() if k.startswith(prefix)}

    def counted_exactly(self, prefix: str) -> bool:
        want = {k: n for k, n in self.expected.items() if k.startswith(prefix)}
        return self.counts(prefix) == want

    def changelog_holds_counts(self, prefix: str) -> bool:
        """Whether the changelog's last record of each key ``prefix`` starts is its count."""
        records = asyncio.run(committed_records(self.bootstrap, CHANGELOG, PARTITIONS))
        # The table's keys and counts are JSON (Faust's default serializers for a table).
        last = {json.loads(r.key): json.loads(r.value) for r in records if r.value is not None}
        want = {k: n for k, n in self.expected.items() if k.startswith(prefix)}
        return {k: n for k, n in last.items() if k in want} == want

    def in_every_log(self, text: str) -> bool:
        return all(text in w.log_path.read_text(errors="replace") for w in self.workers.values())


def run_fault(bootstrap: str, root: Path, *, tag: str, events_while_missing: bool) -> None:
    """Start two workers, delete the changelog, recreate it wrong, then right; check the lines,
    the workers' lives and the counts of events produced once it is right."""
    asyncio.run(create_topic(bootstrap, TOPIC, PARTITIONS))
    group = Counting(bootstrap, root)
    try:
        group.start("w1")
        group.wait("w1 holding every partition", lambda: group.actives(TOPIC) == [0, 1, 2, 3], 180)
        group.start("w2")
        group.wait(
            "both workers holding partitions",
            lambda: all(
                w.get_json("/streamapp/assignment")["active"].get(TOPIC)
                for w in group.workers.values()
            ),
            180,
        )
        group.produce(200, f"{tag}a")
        group.wait("the first events counted", lambda: group.counted_exactly(f"{tag}a"), 120)
        # Every key's count in the changelog (a key counted several times in one run of records
        # sends its last count only); a write still in the producer's buffer when the topic goes
        # is a write while it is missing, which the second test is about.
        group.wait(
            "every table write in the changelog",
            lambda: group.changelog_holds_counts(f"{tag}a"),
            60,
        )

        asyncio.run(delete_topic(bootstrap, CHANGELOG))
        group.wait("each worker saying it is missing", lambda: group.in_every_log(MISSING), 60)
        if events_while_missing:
            # The source topic keeps them; the table cannot take them now.
            group.produce(100, f"{tag}b")

        asyncio.run(create_changelog(bootstrap, 2))
        group.wait("each worker saying it has 2 partitions", lambda: group.in_every_log(WRONG), 60)

        asyncio.run(delete_topic(bootstrap, CHANGELOG))
        asyncio.run(create_changelog(bootstrap, PARTITIONS))
        group.wait("each worker saying it is right again", lambda: group.in_every_log(RIGHT), 60)
        group.wait(
            "every table partition served again",
            lambda: group.actives(CHANGELOG) == [0, 1, 2, 3],
            180,
        )
        group.produce(200, f"{tag}c")
        group.wait(
            "the events produced after it came back counted",
            lambda: group.counted_exactly(f"{tag}c"),
            180,
        )

        for name, worker in group.workers.items():
            log = worker.log_path.read_text(errors="replace")
            assert log.count(MISSING) == 1 and log.count(WRONG) == 1, name
            assert "We experienced a crash" not in log, name
            assert NOT_FOUND not in log, (name, log.count(NOT_FOUND))
            line = next(ln for ln in log.splitlines() if MISSING in ln)
            assert "[WARNING]" in line and "create it with 4 partitions" in line
            line = next(ln for ln in log.splitlines() if WRONG in ln)
            assert "delete it and create it again with 4 partitions" in line
    finally:
        for worker in group.workers.values():
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()


def test_a_changelog_deleted_while_workers_idle(kafka_bootstrap: str, tmp_path: Path) -> None:
    run_fault(kafka_bootstrap, tmp_path, tag="idle-", events_while_missing=False)


def test_a_changelog_deleted_while_events_flow(kafka_bootstrap: str, tmp_path: Path) -> None:
    # The table's writes while it is missing wait in the producer
    # (streamapp.runtime.producer.partition_wait); on main, aiokafka's 'Unrecognized partition'
    # assertion crashed the worker.
    run_fault(kafka_bootstrap, tmp_path, tag="busy-", events_while_missing=True)
