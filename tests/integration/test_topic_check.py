"""Topics are checked before anything is processed, on the session's real broker.

The local broker creates no topic a client merely names; a worker refuses, in one line and
exit status 2, a missing source topic (naming the count and the command that creates it) and
topics that must be co-partitioned but differ in partition count; `--create-topics` and
`streamapp topics create` create the missing ones from the app's declaration.

Each test writes its own small app (its own id and topic names, so tests sharing the
broker never see each other's topics) into a directory put on the workers' PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from streamapp.testing.kafka_io import create_topic
from streamapp.testing.worker import REPO_ROOT, WorkerProcess

PARTITIONS = 4

# One source feeding one table, as in the README: both declared with PARTITIONS partitions;
# a page shows the counts of this worker (the only one, so all of them).
_APP = """
from typing import Any

from streamapp import App

app = App({app_id!r}, topic_partitions={partitions})
events = app.topic(
    {topic!r},
    key_type=str,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions={partitions},
)
counts = app.Table("counts", default=int, partitions={partitions})


@app.agent(events)
async def count(stream: Any) -> None:
    async for key, _value in stream.items():
        counts[key] += 1


@app.page("/counts/")
async def get_counts(web: Any, request: Any) -> Any:
    return web.json(dict(counts.items()))
"""

# Two topics declared together (one agent joins them): co-partitioned by declaration.
_JOIN_APP = """
from typing import Any

from streamapp import App

app = App({app_id!r})
both = app.topic({left!r}, {right!r}, partitions={partitions})


@app.agent(both)
async def join(stream: Any) -> None:
    async for _event in stream:
        pass
"""


# A windowed join and a temporal stream-table join writing to output topics, late records to
# dead-letter topics, bad records to the app's dead-letter topic.
_JOINS_APP = """
from streamapp import App
from streamapp.aggregates import WindowedAggregate, Windows
from streamapp.joins import JoinWindow, StreamTableJoin, WindowedJoin

app = App({app_id!r}, topic_partitions=2, bad_record_policy="dead-letter")
orders = app.topic("{run}-orders", partitions=3)
payments = app.topic("{run}-payments", partitions=3)
customers = app.topic("{run}-customers", partitions=3)
WindowedJoin(
    app,
    "paid",
    left=orders,
    right=payments,
    window=JoinWindow.within(10),
    output=app.topic("{run}-paid"),
    dead_letter_topic="{run}-late",
)
StreamTableJoin(
    app,
    "labelled",
    stream=orders,
    table=customers,
    history_ms=1000,
    output=app.topic("{run}-labelled", partitions=6),
)
WindowedAggregate.count(app, "counts", source=orders, windows=Windows.session(10), output=print)
"""


class AppModule:
    """An app module of one test: its name for -A, its topics, and the changelog of its table."""

    def __init__(self, directory: Path, source: str, **names: object) -> None:
        self.module = f"topic_check_{uuid.uuid4().hex[:8]}"
        (directory / f"{self.module}.py").write_text(source.format(**names))
        self.spec = f"{self.module}:app"


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "apps"
    directory.mkdir()
    # WorkerProcess passes its environment on; the worker runs in the repository root.
    monkeypatch.setenv("PYTHONPATH", f"{directory}:{REPO_ROOT}")
    return directory


def _names() -> dict[str, object]:
    run = uuid.uuid4().hex[:8]
    return {"app_id": f"it-topics-{run}", "topic": f"it-topics-{run}-events", "run": run}


def _counter_app(app_dir: Path) -> tuple[AppModule, str, str]:
    names = _names()
    app = AppModule(app_dir, _APP, partitions=PARTITIONS, **names)
    return app, str(names["topic"]), f"{names['app_id']}-counts-changelog"


async def _partition_counts(bootstrap: str) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics()}
    finally:
        await admin.close()


def _refusal(worker: WorkerProcess) -> str:
    """The one line a refusing worker wrote; asserts it exited 2 and wrote just that line."""
    assert worker.process is not None
    status = worker.process.wait(timeout=90)
    log_text = worker.log_path.read_text(errors="replace")
    assert status == 2, log_text
    assert "Traceback" not in log_text, log_text
    lines = [line for line in log_text.splitlines() if line.startswith("streamapp worker:")]
    assert len(lines) == 1, log_text
    return lines[0]


def _streamapp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamapp", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


async def _produce(bootstrap: str, topic: str, keys: list[str]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key in keys:
            await producer.send(topic, key=key.encode(), value=b"x")
        await producer.flush()
    finally:
        await producer.stop()


async def _send_to_unknown_topic(bootstrap: str, topic: str) -> BaseException | None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"x")
    except KafkaError as exc:
        return exc
    finally:
        await producer.stop()
    return None


def test_the_local_broker_creates_no_topic_a_client_names(kafka_bootstrap: str) -> None:
    topic = f"it-topics-unknown-{uuid.uuid4().hex[:8]}"
    failure = asyncio.run(_send_to_unknown_topic(kafka_bootstrap, topic))
    assert failure is not None, "the broker auto-created a topic a producer named"
    assert topic not in asyncio.run(_partition_counts(kafka_bootstrap))


def test_a_missing_source_topic_refuses_the_worker_in_one_line(
    kafka_bootstrap: str, app_dir: Path
) -> None:
    app, topic, _changelog = _counter_app(app_dir)
    worker = WorkerProcess(app.spec, kafka_bootstrap, app_dir.parent / "w1").start()
    line = _refusal(worker)
    assert line == (
        f"streamapp worker: source topic {topic} does not exist; create it with {PARTITIONS} "
        f"partitions (as the app declares it): streamapp topics create -A {app.spec} "
        f"--broker {kafka_bootstrap} (or start the worker with --create-topics)"
    )
    # The check looked; it created nothing.
    assert topic not in asyncio.run(_partition_counts(kafka_bootstrap))


def test_a_source_sized_unlike_its_table_refuses_every_worker(
    kafka_bootstrap: str, app_dir: Path
) -> None:
    app, topic, changelog = _counter_app(app_dir)
    asyncio.run(create_topic(kafka_bootstrap, topic, 2))
    workers = [
        WorkerProcess(app.spec, kafka_bootstrap, app_dir.parent / f"w{i}").start() for i in (1, 2)
    ]
    lines = [_refusal(worker) for worker in workers]
    # Every worker refuses, and the same way: it is a startup check, not a leader's decision.
    assert lines[0] == lines[1]
    assert lines[0] == (
        "streamapp worker: topics that must be co-partitioned differ in partition count: "
        f"{topic} has 2 partitions, {changelog} (changelog of table counts) does not exist "
        f"yet, declared with {PARTITIONS} partitions; give them one count (a topic cannot lose "
        "partitions: recreate it, or declare the count it has with partitions=)"
    )
    # Nobody got as far as Faust creating the changelog.
    assert changelog not in asyncio.run(_partition_counts(kafka_bootstrap))


def test_a_changelog_sized_unlike_its_table_refuses_the_worker(
    kafka_bootstrap: str, app_dir: Path
) -> None:
    # What the broker used to do to a deleted changelog: bring it back with 1 partition.
    app, topic, changelog = _counter_app(app_dir)
    asyncio.run(create_topic(kafka_bootstrap, topic, PARTITIONS))
    asyncio.run(create_topic(kafka_bootstrap, changelog, 1))
    line = _refusal(WorkerProcess(app.spec, kafka_bootstrap, app_dir.parent / "w1").start())
    assert (
        f"{topic} has {PARTITIONS} partitions, {changelog} (changelog of table counts) has "
        f"1 partition but the table declares {PARTITIONS};"
    ) in line


def test_create_topics_lets_the_worker_start_and_process(
    kafka_bootstrap: str, app_dir: Path
) -> None:
    app, topic, _changelog = _counter_app(app_dir)
    keys = [f"k{i % 5}" for i in range(40)]
    with WorkerProcess(
        app.spec, kafka_bootstrap, app_dir.parent / "w1", "--create-topics"
    ) as worker:
        worker.wait_for("/counts/", lambda counts: isinstance(counts, dict), timeout=180)
        assert asyncio.run(_partition_counts(kafka_bootstrap))[topic] == PARTITIONS
        asyncio.run(_produce(kafka_bootstrap, topic, keys))
        counts = worker.wait_for("/counts/", lambda c: sum(c.values()) >= len(keys))
        assert counts == {f"k{i}": 8 for i in range(5)}
        assert worker.stop() == 0, worker.log_tail()
    log_text = worker.log_path.read_text(errors="replace")
    assert (
        f"streamapp worker: created source topics {topic} ({PARTITIONS} partitions, "
        "replication factor 1)"
    ) in log_text


def test_topics_create_creates_the_declared_topics(kafka_bootstrap: str, app_dir: Path) -> None:
    app, topic, changelog = _counter_app(app_dir)
    args = ("topics", "create", "-A", app.spec, "--broker", kafka_bootstrap)
    first = _streamapp(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        f"created {topic} ({PARTITIONS} partitions, replication factor 1)"
    ]
    counts = asyncio.run(_partition_counts(kafka_bootstrap))
    assert counts[topic] == PARTITIONS
    assert changelog not in counts  # Faust's own topics are Faust's to create
    again = _streamapp(*args)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [f"already there: {topic} ({PARTITIONS} partitions)"]


def test_topics_create_creates_the_topics_joins_write_to(
    kafka_bootstrap: str, app_dir: Path
) -> None:
    names = _names()
    run = names["run"]
    app = AppModule(app_dir, _JOINS_APP, **names)
    args = ("topics", "create", "-A", app.spec, "--broker", kafka_bootstrap)
    asyncio.run(create_topic(kafka_bootstrap, f"{run}-payments", 3))  # one there already
    first = _streamapp(*args)
    assert first.returncode == 0, first.stderr
    created = ", replication factor 1)"
    assert first.stdout.splitlines() == [
        f"created {run}-customers (3 partitions{created}",
        f"created {run}-orders (3 partitions{created}",
        f"created {run}-labelled (6 partitions{created}: output of join labelled",
        f"created {run}-late (1 partition{created}: late records of join paid",
        f"created {run}-paid (3 partitions{created}: output of join paid",
        f"created {names['app_id']}-dead-letters (1 partition{created}: dead letters "
        "(bad_record_policy)",
        f"already there: {run}-payments (3 partitions)",
    ]
    counts = asyncio.run(_partition_counts(kafka_bootstrap))
    assert counts[f"{run}-paid"] == 3 and counts[f"{run}-labelled"] == 6
    again = _streamapp(*args)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        f"already there: {run}-customers (3 partitions)",
        f"already there: {run}-orders (3 partitions)",
        f"already there: {run}-payments (3 partitions)",
        f"already there: {run}-labelled (6 partitions): output of join labelled",
        f"already there: {run}-late (1 partition): late records of join paid",
        f"already there: {run}-paid (3 partitions): output of join paid",
        f"already there: {names['app_id']}-dead-letters (1 partition): dead letters "
        "(bad_record_policy)",
    ]


def test_topics_create_creates_nothing_when_the_result_could_not_be_joined(
    kafka_bootstrap: str, app_dir: Path
) -> None:
    names = _names()
    left, right = f"it-topics-{names['run']}-left", f"it-topics-{names['run']}-right"
    app = AppModule(app_dir, _JOIN_APP, left=left, right=right, partitions=3, **names)
    asyncio.run(create_topic(kafka_bootstrap, left, 2))
    result = _streamapp("topics", "create", "-A", app.spec, "--broker", kafka_bootstrap)
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"streamapp topics create: source topic {right} does not exist;")
    assert (
        f"differ in partition count: {left} has 2 partitions, {right} does not exist yet, "
        "declared with 3 partitions;"
    ) in line
    assert right not in asyncio.run(_partition_counts(kafka_bootstrap))
