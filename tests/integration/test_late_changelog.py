"""A global table's changelog created after the workers joined the group (tests/integration/apps/
late_changelog.py, two `streamapp worker` processes on a real broker).

What a worker meets when Faust's creation of a changelog at startup comes after its consumer's
first metadata request (seen under load in the joins tests): the group's leader plans without
the topic ("has no partitions (yet); left out"), and its metadata lists the topic with 0
partitions. Asserted: the records written to the table meanwhile are not refused for a
changelog "of 0 partitions" (they wait for the topic, streamapp.runtime.producer.partition_wait),
and once the topic exists the leader's metadata learns of it and the group plans with it
(`streamapp.left_out_topics`), so each worker's global table gets what the other wrote. Before
either, the leader skipped those records (PartitionsMismatch), and the changelog stayed
unassigned until the leader's metadata max age (five minutes).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streamapp.testing.kafka_io import create_topic, produce
from streamapp.testing.worker import WorkerProcess

from .workers import wait_for_workers

APP = "tests.integration.apps.late_changelog:app"
PARTITIONS = 2  # the app's
NAMES = 200


async def create_changelog(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, PARTITIONS, 1, topic_configs={"cleanup.policy": "compact"})]
        )
    finally:
        await admin.close()


def _key(seq: int) -> str:
    return f"name-{seq}"


def test_a_changelog_created_after_the_join_is_planned_with(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    app_id = f"it-late-{int(time.time() * 1000) % 10**8}"
    source, changelog = f"{app_id}-names", f"{app_id}-names-changelog"
    asyncio.run(create_topic(kafka_bootstrap, source, PARTITIONS))
    # Faust's leader topic too (the app creates none); it has one partition.
    asyncio.run(create_topic(kafka_bootstrap, f"{app_id}-__assignor-__leader", 1))
    workers = {
        name: WorkerProcess(
            APP, kafka_bootstrap, tmp_path / name, "--client-id", name, env={"LATE_APP_ID": app_id}
        )
        for name in ("a", "b")
    }
    try:
        for worker in workers.values():
            worker.start()

        def held(topic: str) -> list[list[int]]:
            return [
                sorted(w.get_json("/streamapp/assignment")["active"].get(topic, []))
                for w in workers.values()
            ]

        # Both workers process a partition of the names each: the group planned without the
        # changelog, which does not exist yet.
        wait_for_workers(
            workers,
            "both workers to hold a names partition",
            lambda: (
                sorted(p for ps in held(source) for p in ps) == list(range(PARTITIONS))
                and all(held(source))
            ),
            timeout=120,
        )
        assert held(changelog) == [[], []]
        # Written to the table while its changelog does not exist: each worker's own writes
        # are in its store at once, their changelog records wait for the topic.
        asyncio.run(produce(kafka_bootstrap, source, range(NAMES), _key))
        expected = {_key(seq): seq for seq in range(NAMES)}

        def tables() -> list[dict[str, int]]:
            return [w.get_json("/names/") for w in workers.values()]

        def merged() -> dict[str, int]:
            return {k: v for t in tables() for k, v in t.items()}

        wait_for_workers(
            workers,
            "the workers' own writes",
            lambda: merged() == expected,
            timeout=120,
            details=lambda: f"sizes: {[len(t) for t in tables()]}, want {NAMES} in all",
        )
        assert held(changelog) == [[], []]  # still not planned with: it does not exist
        asyncio.run(create_changelog(kafka_bootstrap, changelog))
        wait_for_workers(
            workers,
            "both workers to hold every changelog partition",
            lambda: held(changelog) == [list(range(PARTITIONS))] * 2,
            timeout=120,
            details=lambda: f"changelog held: {held(changelog)}",
        )
        wait_for_workers(
            workers,
            "each worker's global table to hold every name",
            lambda: all(t == expected for t in tables()),
            timeout=120,
            details=lambda: f"sizes: {[len(t) for t in tables()]}, want {NAMES}",
        )
        for worker in workers.values():
            log = worker.log_path.read_text(errors="replace")
            assert "PartitionsMismatch" not in log
    finally:
        for worker in workers.values():
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()
