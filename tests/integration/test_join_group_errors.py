"""A client joins a streamapp group with a subscription envelope the broker cannot parse:
random bytes as the whole consumer-protocol subscription, not only its user data.

What a Kafka 3.9.1 broker does with it (seen in its log): its classic group coordinator throws
(``non-nullable field topics was serialized as null``) while completing the join, answers the
JoinGroup that completed it with UNKNOWN_SERVER_ERROR, and never answers the other members'
JoinGroups; the group stays stuck in PreparingRebalance, even after the stray member left,
until the coordinator reloads the group (here: a broker restart). On main, the worker that got
the error answer crashed (aiokafka raised it into Faust's fetcher) and the other retried for
minutes.

Here: both workers stay alive through the stuck group and the restart, the one that got the
answer says once what the broker answered, and every event produced while the stray member
was there and after is counted exactly.

Kafka 4.x (its group coordinator was rewritten, KIP-848, and runs classic groups too) behaves
otherwise, seen on 4.4.0: it logs one WARN (``Failed to parse Consumer Protocol
consumer:streamapp of group ...``), keeps the envelope as opaque bytes and completes the join
normally. No error answer and no stuck group: the stray member is an ordinary member whose
metadata streamapp cannot read, so the leader gives it no partitions (as in
test_rogue_members) and the events are counted while it is still in the group. The leader is
handed the raw bytes, which aiokafka could fail to decode and crash on, depending on them:
`streamapp.runtime.group.member_envelopes` hands those to streamapp's assignor instead. The test
checks what the release it runs on does.

The test runs its own broker: it restarts it, and the stuck group must not touch other tests.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamapp.kafka import LocalKafka
from streamapp.kafka.probe import free_port
from streamapp.testing.kafka_io import create_topic, produce
from streamapp.testing.worker import REPO_ROOT, WorkerProcess
from tests.integration.apps.join_errors_counter import (
    APP_ID,
    CHANGELOG,
    LEADER_TOPIC,
    PARTITIONS,
    TOPIC,
)

from .workers import merged_table, wait_for_workers

APP = "tests.integration.apps.join_errors_counter:app"
KEYS = 40
#: The line a worker logs once when the broker answers its JoinGroup with an error.
ANSWERED = "streamapp: the broker answered JoinGroup for group it-join-errors with error code -1"
#: What a Kafka 4.x broker logs instead of throwing (`broker_parses_envelope_lazily`).
BROKER_4X_WARNS = "Failed to parse Consumer Protocol consumer:streamapp of group it-join-errors"
#: The leader's line for a member whose metadata it cannot read (on 4.x the stray is one).
REFUSED = "sent metadata streamapp cannot read"


def broker_parses_envelope_lazily(broker: LocalKafka) -> bool:
    """Kafka 4.x's group coordinator completes a join whose envelope it cannot parse."""
    return broker.release.major >= 4


@pytest.fixture(scope="module")
def own_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    broker = LocalKafka(port=free_port(), data_dir=tmp_path_factory.mktemp("kafka-join-errors"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


class Counting:
    """Two workers of the counting app, the events produced, and the counts they must yield."""

    def __init__(self, bootstrap: str, root: Path) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.workers: dict[str, WorkerProcess] = {}
        self.expected: Counter[str] = Counter()
        self.produced = 0

    def start(self, name: str) -> None:
        worker = WorkerProcess(APP, self.bootstrap, self.root / name, "--client-id", name)
        self.workers[name] = worker.start()

    def wait(self, what: str, check: object, timeout: float) -> None:
        assert callable(check)
        wait_for_workers(self.workers, what, check, timeout=timeout)

    def actives(self, name: str) -> list[int]:
        view = self.workers[name].get_json("/streamapp/assignment")
        return sorted(view["active"].get(TOPIC, []))

    def produce(self, count: int) -> None:
        seqs = range(self.produced, self.produced + count)
        self.expected.update(f"k{seq % KEYS}" for seq in seqs)
        asyncio.run(produce(self.bootstrap, TOPIC, seqs, lambda seq: f"k{seq % KEYS}"))
        self.produced += count

    def counted_exactly(self) -> bool:
        return merged_table(self.workers.values(), "/counts/") == dict(self.expected)

    def log(self, name: str) -> str:
        return self.workers[name].log_path.read_text(errors="replace")

    def stop(self) -> None:
        for worker in self.workers.values():
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()


def start_stray(bootstrap: str, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.apps.rogue_member",
                bootstrap,
                APP_ID,
                "envelope",
                f"{TOPIC}={PARTITIONS}",
                f"{CHANGELOG}={PARTITIONS}",
                f"{LEADER_TOPIC}=1",
            ],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def test_workers_outlive_a_join_the_broker_cannot_parse(
    own_kafka: LocalKafka, tmp_path: Path
) -> None:
    bootstrap = own_kafka.bootstrap
    asyncio.run(create_topic(bootstrap, TOPIC, PARTITIONS))
    group = Counting(bootstrap, tmp_path)
    stray: subprocess.Popen[bytes] | None = None
    try:
        group.start("w1")
        group.wait("w1 holding every partition", lambda: group.actives("w1") == [0, 1, 2, 3], 180)
        group.start("w2")
        group.wait("both workers holding partitions", lambda: group.actives("w2") != [], 180)
        group.wait(
            "every partition held once",
            lambda: sorted(group.actives("w1") + group.actives("w2")) == [0, 1, 2, 3],
            120,
        )
        group.produce(200)
        group.wait("the first events counted", group.counted_exactly, 120)

        stray = start_stray(bootstrap, tmp_path / "stray.log")
        # What follows depends on the broker's release (see the module's docstring).
        if broker_parses_envelope_lazily(own_kafka):
            group.wait(
                "the leader refusing the stray member",
                lambda: any(REFUSED in group.log(name) for name in group.workers),
                120,
            )
            group.produce(300)  # while the stray member is in the group
            group.wait(
                "the events produced with the stray member counted", group.counted_exactly, 120
            )
            stray.kill()
            stray.wait()
            group.produce(200)
            group.wait("the events produced after it counted", group.counted_exactly, 120)
            broker_log = own_kafka.log_file.read_text(errors="replace")
            assert BROKER_4X_WARNS in broker_log
            for name in group.workers:
                log = group.log(name)
                assert ANSWERED not in log, log
                assert "We experienced a crash" not in log and "Crashed reason" not in log
                assert not list((tmp_path / name).rglob("damaged")), name
            refusals = [
                ln for n in group.workers for ln in group.log(n).splitlines() if REFUSED in ln
            ]
            # Once, by the leader, naming the stray member and what it got.
            assert len(refusals) == 1 and "rogue-envelope-" in refusals[0], refusals
            assert "given no partitions" in refusals[0]
            return

        # The stray member's JoinGroup parks first; the workers rejoin after it, and the last
        # of them completes the join, which the broker answers with UNKNOWN_SERVER_ERROR.
        group.wait(
            "a worker told that the broker answered its JoinGroup with an error",
            lambda: any(ANSWERED in group.log(name) for name in group.workers),
            120,
        )
        group.produce(300)  # while the stray member is in the (stuck) group

        # Only the coordinator reloading the group ends the broker's stuck state, and the
        # stray member would stick it again: it goes first, then the broker restarts.
        stray.kill()
        stray.wait()
        own_kafka.stop()
        own_kafka.start()
        group.wait("the events produced with the stray member counted", group.counted_exactly, 240)
        group.produce(200)
        group.wait("the events produced after it counted", group.counted_exactly, 120)

        for name in group.workers:
            log = group.log(name)
            # One line, not one per attempt; aiokafka's own per-attempt line is gone.
            assert log.count(ANSWERED) <= 1, log
            assert "Unexpected error in join group" not in log
            assert "We experienced a crash" not in log and "Crashed reason" not in log
            if ANSWERED in log:
                line = next(ln for ln in log.splitlines() if ANSWERED in ln)
                assert "[WARNING]" in line and "keeps its local state" in line
                assert "streamapp: joined group it-join-errors again after" in log
            # Its stores were kept: none was found damaged and set aside.
            assert not list((tmp_path / name).rglob("damaged")), name
        assert sum(ANSWERED in group.log(name) for name in group.workers) >= 1
    finally:
        if stray is not None and stray.poll() is None:
            stray.kill()
            stray.wait()
        group.stop()
