"""Bad records on every input of a join and an aggregate, on a real broker, under both guarantees.

One `streamapp worker` of tests/integration/apps/bad_inputs.py runs a windowed join (both inputs
stream sides), a stream-table join (a stream side and a table side) and a windowed aggregate,
each fed good records mixed with bad ones: a value that is not JSON, a value with no event time,
a key that is not UTF-8, no key. On the table topic a bad record follows a good one of the same
key, the case that once poisoned the key. Run under at-least-once with ``bad_record_policy=skip``
and under exactly_once with ``dead-letter``; its topics are made by ``streamapp topics create``.

Per input kind, asserted exactly: the output is the batch computation over the good records
(nothing missing, duplicated or unexpected), and every bad record is counted once by where it
went bad (``streamapp_records_skipped_total`` or ``streamapp_dead_letters_total``) and, under
dead-letter, delivered to the dead-letter topic with headers naming the record itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from streamapp.bad_records import HEADER_PREFIX
from streamapp.testing.kafka_io import committed_records
from streamapp.testing.worker import REPO_ROOT, WorkerProcess
from tests.integration.apps.bad_inputs import PARTITIONS, TUMBLING, WINDOW

from .workers import wait_for_workers

APP = "tests.integration.apps.bad_inputs:app"
BASE_MS = 1_700_000_000_000
CLOSING_MS = BASE_MS + 10_000_000  # past every window's close: the aggregate emits them all

#: (key, value) of the bad records, each with the stage it goes bad at.
BAD = [
    (b"k1", b"\xff not json", "value-decode"),
    (b"k2", b'{"id": "no-ts"}', "processing"),  # no event time where the source reads one
    (b"\xff\xfe", b'{"id": "bad-key", "ts": 1}', "key-decode"),
    (None, b'{"id": "no-key", "ts": 1}', "processing"),
]


@dataclass
class Placed:
    """A record produced, and where it landed."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    stage: str | None = None  # where it goes bad; None for a good record

    @property
    def decoded(self) -> Any:
        return json.loads(self.value) if self.value is not None else None


@dataclass
class Run:
    """One run: its app id, topics, what was produced, and what came out."""

    app_id: str
    guarantee: str
    policy: str
    produced: list[Placed] = field(default_factory=list)
    outputs: dict[str, list[Any]] = field(default_factory=dict)
    dead_letters: list[Any] = field(default_factory=list)
    metrics: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def topic(self, name: str) -> str:
        return f"{self.app_id}-{name}"

    def good(self, name: str) -> list[Placed]:
        return [p for p in self.produced if p.topic == self.topic(name) and p.stage is None]

    def bad(self, *names: str) -> list[Placed]:
        topics = {self.topic(n) for n in names}
        return [p for p in self.produced if p.topic in topics and p.stage is not None]


async def _produce(
    bootstrap: str, records: list[tuple[str, bytes | None, bytes | None, str | None]]
) -> list[Placed]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    placed = []
    try:
        for topic, key, value, stage in records:
            meta = await (await producer.send(topic, key=key, value=value))
            placed.append(Placed(topic, key, value, meta.partition, meta.offset, stage))
    finally:
        await producer.stop()
    return placed


def _json(value: dict[str, Any] | None) -> bytes | None:
    return None if value is None else json.dumps(value).encode()


def _with_bad(
    topic: str,
    good: list[tuple[bytes | None, bytes | None]],
    at: int,
    bad: list[tuple[bytes | None, bytes, str]] = BAD,
) -> list[Any]:
    """``good`` records of ``topic`` with the ``bad`` ones put in after the first ``at``."""
    records: list[Any] = [(topic, k, v, None) for k, v in good]
    return records[:at] + [(topic, k, v, stage) for k, v, stage in bad] + records[at:]


def _metrics(worker: WorkerProcess) -> dict[tuple[str, str, str], float]:
    """(family, topic, reason) -> value of the bad-record counters on ``/metrics``."""
    url = f"http://127.0.0.1:{worker.web_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[tuple[str, str, str], float] = {}
    for line in text.splitlines():
        for family in ("streamapp_records_skipped_total", "streamapp_dead_letters_total"):
            if line.startswith(family + "{"):
                labels, _, value = line[len(family) + 1 :].rpartition("} ")
                parsed = dict(part.split("=", 1) for part in labels.split(","))
                topic, reason = parsed["topic"].strip('"'), parsed["reason"].strip('"')
                out[(family, topic, reason)] = float(value)
    return out


def _settled(worker: WorkerProcess, topic: str) -> bool:
    view = worker.get_json("/streamapp/assignment")
    return (
        sorted(view["active"].get(topic, [])) == list(range(PARTITIONS))
        and bool(view["history"])
        and view["history"][-1]["plan_generation"] == view["plan_generation"]
    )


def _outputs(bootstrap: str, run: Run) -> dict[str, list[Any]]:
    out = {}
    for name in ("paid", "labelled", "totals"):
        records = asyncio.run(committed_records(bootstrap, run.topic(name), PARTITIONS))
        out[name] = [(r.key.decode(), json.loads(r.value)) for r in records]
    return out


# -- the batch computations over the good records --


def expected_pairs(run: Run) -> Counter[tuple[str, str]]:
    orders, payments = run.good("orders"), run.good("payments")
    pairs: Counter[tuple[str, str]] = Counter()
    for o in orders:
        for p in payments:
            if o.key == p.key and WINDOW.matches(o.decoded["ts"], p.decoded["ts"]):
                pairs[(o.decoded["id"], p.decoded["id"])] += 1
    return pairs


def expected_labels(run: Run) -> Counter[tuple[str, str | None]]:
    names: dict[bytes | None, str | None] = {}
    for c in run.good("customers"):  # in the order produced: the latest wins
        names[c.key] = c.decoded["name"] if c.value is not None else None
    return Counter((s.decoded["id"], names.get(s.key)) for s in run.good("shipments"))


def expected_totals(run: Run) -> Counter[tuple[str, int, int]]:
    """Per store and window its partition's clock has closed, the sum of its sales, straight
    from the rule (a sale goes into its window while the clock has not closed it)."""
    sums: dict[tuple[str, int, int], int] = {}
    clocks: dict[int, int] = {}
    for s in sorted(run.good("sales"), key=lambda s: (s.partition, s.offset)):
        t = s.decoded["ts"]
        clock = clocks[s.partition] = max(clocks.get(s.partition, t), t)
        assert s.key is not None
        for start in TUMBLING.open_starts(t, clock):
            key = (s.key.decode(), start, s.partition)
            sums[key] = sums.get(key, 0) + s.decoded["amount"]
    return Counter(
        (store, start, total)
        for (store, start, p), total in sums.items()
        if TUMBLING.is_closed(start, clocks[p])
    )


# -- the run --


@pytest.fixture(
    scope="module",
    params=[("at_least_once", "skip"), ("exactly_once", "dead-letter")],
    ids=["at_least_once-skip", "exactly_once-dead-letter"],
)
def run(
    request: pytest.FixtureRequest,
    kafka_bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Run]:
    guarantee, policy = request.param
    this = Run(f"it-badin-{int(time.time() * 1000) % 10**8}", guarantee, policy)
    environ = {"BADIN_APP_ID": this.app_id, "BADIN_GUARANTEE": guarantee, "BADIN_POLICY": policy}
    made = _topics_create(kafka_bootstrap, environ)
    assert made.returncode == 0, made.stderr
    worker = WorkerProcess(
        APP, kafka_bootstrap, tmp_path_factory.mktemp("badin") / "w", env=environ
    )
    workers = {"w": worker}
    try:
        worker.start()
        wait_for_workers(
            workers,
            "the worker to process",
            lambda: _settled(worker, this.topic("orders")),
            timeout=180,
        )
        # The table first: good values, then a bad record after a good one of the same key.
        customers = [(f"k{i}".encode(), _json({"name": f"customer {i}"})) for i in range(10)]
        customers += [(b"k5", _json({"name": "customer 5, renamed"})), (b"k8", None)]
        # (The table reads no event time: a value without one is a good record there.)
        poison = [(f"k{i}".encode(), b"\xff poison", "value-decode") for i in range(5)]
        table_bad = [b for b in BAD if b[2] != "processing" or b[0] is None] + poison
        table = _with_bad(this.topic("customers"), customers, len(customers), table_bad)
        this.produced += asyncio.run(_produce(kafka_bootstrap, table))
        wait_for_workers(
            workers,
            "the customers table",
            lambda: worker.get_json("/bad-inputs/customers/")["keys"] == 9,
            timeout=120,
        )
        orders = [
            (f"k{i % 20}".encode(), _json({"id": f"o{i}", "ts": BASE_MS + i * 100}))
            for i in range(40)
        ]
        payments = [
            (f"k{i % 20}".encode(), _json({"id": f"p{i}", "ts": BASE_MS + i * 100 + 300}))
            for i in range(40)
            if i % 3 != 2
        ]
        shipments = [
            (f"k{i % 12}".encode(), _json({"id": f"s{i}", "ts": BASE_MS + i})) for i in range(30)
        ]
        sales = [
            (f"store{i % 6}".encode(), _json({"ts": BASE_MS + i * 50, "amount": i % 7 + 1}))
            for i in range(60)
        ]
        records = _with_bad(this.topic("orders"), orders, 10)
        records += _with_bad(this.topic("payments"), payments, 10)
        records += _with_bad(this.topic("shipments"), shipments, 10)
        records += _with_bad(this.topic("sales"), sales, 20)
        this.produced += asyncio.run(_produce(kafka_bootstrap, records))
        # A closing sale in every partition: every window before it closes.
        closing = [
            (this.topic("sales"), f"store{i}".encode(), _json({"ts": CLOSING_MS, "amount": 0}))
            for i in range(6)
        ]
        this.produced += asyncio.run(
            _produce(kafka_bootstrap, [(t, k, v, None) for t, k, v in closing])
        )
        assert {p.partition for p in this.produced[-6:]} == set(range(PARTITIONS))
        want = {
            "paid": sum(expected_pairs(this).values()),
            "labelled": sum(expected_labels(this).values()),
            "totals": sum(expected_totals(this).values()),
        }

        def complete() -> bool:
            got = _outputs(kafka_bootstrap, this)
            return all(len(got[name]) >= n for name, n in want.items())

        wait_for_workers(
            workers,
            "every output",
            complete,
            timeout=180,
            details=lambda: (
                f"want {want}, got "
                f"{ {k: len(v) for k, v in _outputs(kafka_bootstrap, this).items()} }"
            ),
        )
        time.sleep(3.0)  # anything that should not be there has had time to come out
        this.outputs = _outputs(kafka_bootstrap, this)
        this.metrics = _metrics(worker)
        if policy == "dead-letter":
            dead = asyncio.run(committed_records(kafka_bootstrap, f"{this.app_id}-dead-letters", 1))
            this.dead_letters = dead
        assert worker.alive(), worker.log_tail()
        yield this
    finally:
        if worker.alive():
            worker.stop()


def _topics_create(bootstrap: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``streamapp topics create`` for the app: its sources, outputs and dead-letter topic."""
    return subprocess.run(
        [sys.executable, "-m", "streamapp", "topics", "create", "-A", APP, "--broker", bootstrap],
        cwd=REPO_ROOT,
        env={**os.environ, **environ},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _assert_bad_records_handled(run: Run, *names: str) -> None:
    """Every bad record of the ``names`` topics counted once by where it went bad and, under
    dead-letter, delivered with headers naming the record itself (not another one)."""
    bad = run.bad(*names)
    assert bad, "the run produced bad records"
    family = (
        "streamapp_records_skipped_total"
        if run.policy == "skip"
        else "streamapp_dead_letters_total"
    )
    want: Counter[tuple[str, str, str]] = Counter((family, p.topic, p.stage or "") for p in bad)
    got = {k: v for k, v in run.metrics.items() if k[1] in {run.topic(n) for n in names}}
    assert got == {k: float(n) for k, n in want.items()}
    if run.policy != "dead-letter":
        return
    letters = []
    for r in run.dead_letters:
        h = {k.removeprefix(HEADER_PREFIX): v.decode() for k, v in r.headers}
        if h["topic"] in {run.topic(n) for n in names}:
            letters.append((h["topic"], int(h["partition"]), int(h["offset"]), h["stage"], r.value))
    assert sorted(letters) == sorted(
        (p.topic, p.partition, p.offset, p.stage, p.value) for p in bad
    )


def test_stream_side_bad_records_never_join(run: Run) -> None:
    got = Counter((v["order"], v["payment"]) for _key, v in run.outputs["paid"])
    want = expected_pairs(run)
    assert len(want) > 20
    print(f"windowed join ({run.guarantee}): {_diff(want, got)}")
    assert got == want
    _assert_bad_records_handled(run, "orders", "payments")


def test_table_side_bad_records_leave_the_table_as_it_was(run: Run) -> None:
    got = Counter((v["shipment"], v["customer"]) for _key, v in run.outputs["labelled"])
    want = expected_labels(run)
    # The keys a bad record followed still have their last good value; k8 was deleted.
    assert want[("s0", "customer 0")] == 1 and want[("s5", "customer 5, renamed")] == 1
    assert want[("s8", None)] == 1 and want[("s10", None)] == 1
    print(f"stream-table join ({run.guarantee}): {_diff(want, got)}")
    assert got == want
    _assert_bad_records_handled(run, "shipments", "customers")
    assert len(run.bad("customers")) == len(BAD) - 1 + 5


def test_aggregate_source_bad_records_are_never_folded(run: Run) -> None:
    got = Counter((key, v["start"], v["value"]) for key, v in run.outputs["totals"])
    want = expected_totals(run)
    assert len(want) > 10
    print(f"aggregate ({run.guarantee}): {_diff(want, got)}")
    assert got == want
    _assert_bad_records_handled(run, "sales")


def _diff(want: Counter[Any], got: Counter[Any]) -> str:
    missing = sum((want - got).values())
    unexpected = sum(n for k, n in got.items() if k not in want)
    duplicated = sum(n - want[k] for k, n in got.items() if k in want and n > want[k])
    return (
        f"{sum(want.values())} expected, {missing} missing, {duplicated} duplicated, "
        f"{unexpected} unexpected"
    )
