"""Records that do not decode, or make the agent raise, on a real broker with two real workers.

Good records (JSON values ``{"n": ...}``) are mixed with bad ones: random bytes, an empty value and
``{not json`` where the value is JSON, a key that is not UTF-8 where the key is a string, and a
``{"poison": true}`` that decodes but makes the agent raise. Under ``skip`` and ``dead-letter`` both
workers keep running, the table holds exactly the good records' sums, every bad record is counted
in ``/streamapp/assignment`` and its offset committed; under ``fail`` the agent raises as in stock
Faust. Each test runs its own app id (topics, group, dead-letter topic) on the session's broker.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from streamapp.bad_records import HEADER_PREFIX
from streamapp.testing.kafka_io import create_topic, partition_ends
from streamapp.testing.worker import WorkerProcess
from tests.integration.apps.bad_records import PARTITIONS

from .workers import merged_table

APP = "tests.integration.apps.bad_records:app"
KEYS = 10
GOOD_PER_KEY = 12


class Run:
    """One app id's topic, its two workers, and what was produced to it."""

    def __init__(self, bootstrap: str, root: Path, app_id: str) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.app_id = app_id
        self.topic = f"{app_id}-events"
        self.dead_letters = f"{app_id}-dead-letters"
        self.workers: list[WorkerProcess] = []
        self.expected: dict[str, int] = {}
        #: (partition, offset) -> (key, value, stage) of every bad record produced
        self.bad: dict[tuple[int, int], tuple[bytes | None, bytes | None, str]] = {}
        self.produced = 0

    def start(self, *options: str) -> None:
        asyncio.run(create_topic(self.bootstrap, self.topic, PARTITIONS))
        for name in ("w1", "w2"):
            worker = WorkerProcess(
                APP, self.bootstrap, self.root / name, "--client-id", name, *options
            )
            self.workers.append(worker.start())
        self.wait("both workers share the topic's partitions", self.settled, timeout=240)

    def views(self) -> list[dict[str, Any]]:
        return [w.get_json("/streamapp/assignment") for w in self.workers]

    def settled(self) -> bool:
        views = self.views()
        held = sorted(p for v in views for p in v["active"].get(self.topic, []))
        return held == list(range(PARTITIONS)) and all(
            v["active"].get(self.topic)
            and not v["followup_pending"]
            and v["history"]
            and v["history"][-1]["plan_generation"] == v["plan_generation"]
            for v in views
        )

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.assert_running()
            try:
                if check():
                    return
            except OSError:
                pass  # a web view not up yet
            time.sleep(0.5)
        tails = "\n".join(f"--- {w.data_dir.name}\n{w.log_tail(60)}" for w in self.workers)
        raise AssertionError(f"not reached in {timeout:.0f} s: {what}\n{tails}")

    def assert_running(self) -> None:
        for worker in self.workers:
            assert worker.process is not None
            if worker.process.poll() is not None:
                raise AssertionError(
                    f"{worker.data_dir.name} exited with {worker.process.returncode}:\n"
                    f"{worker.log_tail(80)}"
                )

    def produce_mix(self) -> None:
        """Good records for every key, each key's run interleaved with bad records."""
        records: list[tuple[bytes | None, bytes | None, str | None]] = []
        for i in range(GOOD_PER_KEY * KEYS):
            key = f"k{i % KEYS}"
            n = i % 5 + 1
            self.expected[key] = self.expected.get(key, 0) + n
            records.append((key.encode(), json.dumps({"n": n}).encode(), None))
            if i % 20 == 3:
                records.append((key.encode(), b"{not json", "value-decode"))
            elif i % 20 == 8:
                records.append((key.encode(), b"", "value-decode"))
            elif i % 20 == 12:
                # Never valid UTF-8, so never valid JSON either.
                records.append((key.encode(), b"\xff" + os.urandom(15), "value-decode"))
            elif i % 20 == 15:
                records.append((b"\xfe\xff" + os.urandom(4), b'{"n": 1}', "key-decode"))
            elif i % 20 == 18:
                records.append((key.encode(), b'{"poison": true}', "processing"))
        asyncio.run(self._send(records))

    async def _send(self, records: list[tuple[bytes | None, bytes | None, str | None]]) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=10)
        await producer.start()
        try:
            pending = [
                (await producer.send(self.topic, key=k, value=v), k, v, stage)
                for k, v, stage in records
            ]
            for future, key, value, stage in pending:
                meta = await future
                if stage is not None:
                    self.bad[(meta.partition, meta.offset)] = (key, value, stage)
        finally:
            await producer.stop()
        self.produced += len(records)

    def sums(self) -> dict[str, int]:
        return merged_table(self.workers, "/sums/")

    def bad_record_counts(self) -> dict[str, int]:
        """This topic's counts of the ``bad_records`` view, summed over the workers."""
        total = {"skipped": 0, "dead_lettered": 0}
        for view in self.views():
            for outcome, n in view["bad_records"].get(self.topic, {}).items():
                total[outcome] += n
        return total

    def committed_to_the_end(self) -> bool:
        ends = asyncio.run(partition_ends(self.bootstrap, self.topic))
        committed = asyncio.run(self._committed())
        return all(committed.get(p, 0) == end for p, end in ends.items())

    async def _committed(self) -> dict[int, int]:
        # Read with the admin client: a consumer in the group would trigger a rebalance.
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            offsets = await admin.list_consumer_group_offsets(self.app_id)
        finally:
            await admin.close()
        return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == self.topic}

    def read_dead_letters(self) -> list[Any]:
        return asyncio.run(self._read_dead_letters())

    async def _read_dead_letters(self) -> list[Any]:
        consumer = AIOKafkaConsumer(
            self.dead_letters,
            bootstrap_servers=self.bootstrap,
            auto_offset_reset="earliest",
            isolation_level="read_committed",  # under exactly_once, committed dead letters only
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            records: list[Any] = []
            while True:
                batch = await consumer.getmany(timeout_ms=2000)
                if not batch:
                    return records
                for part in batch.values():
                    records.extend(part)
        finally:
            await consumer.stop()

    def log_lines(self, text: str) -> list[str]:
        return [
            line
            for w in self.workers
            for line in w.log_path.read_text(errors="replace").splitlines()
            if text in line
        ]

    def stop(self) -> None:
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()


@pytest.fixture
def run_factory(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def make(name: str, guarantee: str = "at_least_once") -> Run:
        app_id = f"it-bad-{name}"
        # The workers inherit the test's environment (see WorkerProcess).
        monkeypatch.setenv("BAD_RECORDS_APP_ID", app_id)
        monkeypatch.setenv("BAD_RECORDS_GUARANTEE", guarantee)
        run = Run(kafka_bootstrap, tmp_path, app_id)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.stop()


def _expect_processed(run: Run, outcome: str) -> None:
    run.wait(
        "every good record summed and every bad one counted",
        lambda: run.sums() == run.expected and run.bad_record_counts()[outcome] == len(run.bad),
    )
    run.wait("committed offsets at the end of every partition", run.committed_to_the_end)
    run.assert_running()
    assert run.sums() == run.expected
    assert run.bad_record_counts() == {
        "skipped": len(run.bad) if outcome == "skipped" else 0,
        "dead_lettered": len(run.bad) if outcome == "dead_lettered" else 0,
    }
    assert not run.log_lines("Crashed reason"), "an agent crashed"


def test_skip_is_the_default_and_both_workers_keep_running(run_factory: Callable[..., Run]) -> None:
    run = run_factory("skip")
    run.start()  # no option: the default policy
    run.produce_mix()
    assert {stage for _k, _v, stage in run.bad.values()} == {
        "value-decode",
        "key-decode",
        "processing",
    }
    _expect_processed(run, "skipped")
    # Each worker counted the bad records of the partitions it holds (the group was settled
    # before anything was produced, so nothing moved meanwhile).
    for worker, view in zip(run.workers, run.views(), strict=True):
        held = set(view["active"][run.topic])
        mine = sum(1 for partition, _offset in run.bad if partition in held)
        assert view["bad_records"].get(run.topic, {}).get("skipped", 0) == mine, worker.data_dir
    skipped = run.log_lines("streamapp: skipped record")
    assert len(skipped) == len(run.bad)
    where = {f"{run.topic}[{p}]@{o}" for p, o in run.bad}
    assert {line.split("skipped record ")[1].split(":")[0] for line in skipped} == where
    assert all("WARNING" in line and "(bad_record_policy=skip)" in line for line in skipped)


def _check_dead_letters(run: Run) -> None:
    letters = run.read_dead_letters()
    assert len(letters) == len(run.bad)
    seen: dict[tuple[int, int], tuple[bytes | None, bytes | None, str]] = {}
    for record in letters:
        headers = dict(record.headers)
        source = (
            int(headers[HEADER_PREFIX + "partition"]),
            int(headers[HEADER_PREFIX + "offset"]),
        )
        assert headers[HEADER_PREFIX + "topic"] == run.topic.encode()
        assert headers[HEADER_PREFIX + "message"], "no error message"
        stage = headers[HEADER_PREFIX + "stage"].decode()
        exception = headers[HEADER_PREFIX + "exception"].decode()
        expected_exception = {
            "value-decode": "faust.exceptions.ValueDecodeError",
            "key-decode": "faust.exceptions.KeyDecodeError",
            "processing": "tests.integration.apps.bad_records.PoisonRecord",
        }[stage]
        assert exception == expected_exception
        # The original bytes, untouched (an empty value stays empty).
        seen[source] = (record.key, record.value, stage)
    assert seen == run.bad


def test_dead_letter_holds_the_original_bytes_and_names_the_error(
    run_factory: Callable[..., Run],
) -> None:
    run = run_factory("dead-letter")
    run.start("--bad-record-policy", "dead-letter")
    # One worker created the topic before it joined; the other found it there.
    assert len(run.log_lines(f"created dead-letter topic {run.dead_letters}")) == 1
    run.produce_mix()
    _expect_processed(run, "dead_lettered")
    _check_dead_letters(run)
    assert len(run.log_lines(f"sent to dead-letter topic {run.dead_letters}")) == len(run.bad)


@pytest.mark.parametrize("policy", ["skip", "dead-letter"])
def test_exactly_once_commits_bad_records_with_the_rest(
    run_factory: Callable[..., Run], policy: str
) -> None:
    run = run_factory(f"eos-{policy}", guarantee="exactly_once")
    run.start("--bad-record-policy", policy)
    run.produce_mix()
    _expect_processed(run, "skipped" if policy == "skip" else "dead_lettered")
    if policy == "dead-letter":
        _check_dead_letters(run)


def test_fail_lets_the_agent_raise_as_faust_does(run_factory: Callable[..., Run]) -> None:
    run = run_factory("fail")
    run.start("--bad-record-policy", "fail")
    asyncio.run(run._send([(b"k1", b"{not json", "value-decode")]))
    ((partition, offset),) = run.bad
    run.wait(
        "the agent crashed on the record",
        lambda: bool(run.log_lines("Crashed reason=ValueDecodeError")),
    )
    (line,) = run.log_lines("bad_record_policy=fail")
    assert f"ERROR] streamapp: record {run.topic}[{partition}]@{offset}: value cannot" in line
    assert run.bad_record_counts() == {"skipped": 0, "dead_lettered": 0}


def test_a_dead_letter_topic_the_broker_refuses_stops_the_start(
    run_factory: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_factory("refused")
    asyncio.run(create_topic(run.bootstrap, run.topic, PARTITIONS))
    monkeypatch.setenv("STREAMAPP_DEAD_LETTER_TOPIC", "no spaces in topic names")
    worker = WorkerProcess(
        APP, run.bootstrap, run.root / "w1", "--bad-record-policy", "dead-letter"
    ).start()
    assert worker.process is not None
    assert worker.process.wait(120) == 2
    (line,) = worker.log_path.read_text().splitlines()
    assert line.startswith(
        "streamapp worker: dead-letter topic no spaces in topic names: the broker refused to "
        "create no spaces in topic names: "
    ), line
