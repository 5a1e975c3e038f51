"""The joins on a real broker, with `streamapp worker` processes of tests/integration/apps/joins.py.

Windowed left join (orders x payments, 4 partitions, 2 workers): one worker is killed with
SIGKILL while the second half of the input is being produced and processed, and restarted.
The output is compared, record for record, with a batch nested-loop join of what was produced
(computed from the produced records' partitions and offsets, with the join's lateness and
expiry rules). Guarantee asserted, under at-least-once: the *set* of outputs equals the
reference exactly (nothing missing, nothing that should not be there); duplicates are allowed
and reported; late records' dead letters are exactly the late records.

Stream-table left join (shipments enriched from customers), co-partitioned and global, 2
workers, one killed with SIGKILL between the two halves of the shipments and restarted: the
set of outputs equals the reference exactly (duplicates allowed, at-least-once); the table,
filled before the shipments, survives the crash.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streamapp.joins import JoinWindow, Side
from streamapp.joins.core import ExpiryIndex
from streamapp.testing.kafka_io import create_topics
from streamapp.testing.worker import WorkerProcess

from .workers import wait_for_workers

APP = "tests.integration.apps.joins:app"
PARTITIONS = 4
WINDOW = JoinWindow(before_ms=200, after_ms=500, grace_ms=2_000)  # as the app's
INDEX = ExpiryIndex()  # the join's default buckets
BASE_MS = 1_700_000_000_000
KEYS = 600


def resumed(worker: WorkerProcess, topic: str) -> bool:
    """The worker holds partitions of ``topic`` and processes its current assignment."""
    view = worker.get_json("/streamapp/assignment")
    return (
        bool(view["active"].get(topic))
        and bool(view["history"])
        and view["history"][-1]["plan_generation"] == view["plan_generation"]
    )


def settled(workers: dict[str, WorkerProcess], topic: str) -> bool:
    held = sorted(
        p
        for w in workers.values()
        for p in w.get_json("/streamapp/assignment")["active"].get(topic, [])
    )
    return held == list(range(PARTITIONS)) and all(resumed(w, topic) for w in workers.values())


def env(app_id: str, **extra: str) -> dict[str, str]:
    return {"JOINIT_APP_ID": app_id, "JOINIT_PARTITIONS": str(PARTITIONS), **extra}


def batch_env(batch: int | None) -> dict[str, str]:
    """The app's joins over batches of ``batch`` records, or record by record (None)."""
    return {} if batch is None else {"JOINIT_BATCH": str(batch)}


def join_worker(bootstrap: str, data_dir: Path, environ: dict[str, str]) -> WorkerProcess:
    return WorkerProcess(APP, bootstrap, data_dir, env=environ)


class Produced:
    """Records produced, with where they landed: (side, key, id, ts, partition, offset)."""

    def __init__(self) -> None:
        self.records: list[tuple[Side, str, str, int, int, int]] = []


async def produce(
    bootstrap: str,
    topics: dict[Side, str],
    records: Sequence[tuple[Side, str, str, int, int | None]],
    produced: Produced,
    *,
    pause_s: float = 0.0,
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for side, key, rid, ts, partition in records:
            value = json.dumps({"id": rid, "ts": ts}).encode()
            meta = await (
                await producer.send(
                    topics[side], value=value, key=key.encode(), partition=partition
                )
            )
            produced.records.append((side, key, rid, ts, meta.partition, meta.offset))
            if pause_s:
                await asyncio.sleep(pause_s)
    finally:
        await producer.stop()


async def read_all(bootstrap: str, topic: str, idle_s: float = 3.0) -> list[dict[str, Any]]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    out: list[dict[str, Any]] = []
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=int(idle_s * 1000))
            if not batch:
                return out
            for records in batch.values():
                for record in records:
                    out.append(
                        {
                            "key": record.key.decode() if record.key else None,
                            "value": json.loads(record.value) if record.value else None,
                            "headers": dict(record.headers),
                        }
                    )
    finally:
        await consumer.stop()


def reference(produced: Produced) -> tuple[Counter[tuple[str, str | None]], set[str]]:
    """The batch left join of what was produced, and the ids of the late records."""
    by_place = sorted(produced.records, key=lambda r: (r[0].value, r[4], r[5]))
    clocks: dict[tuple[Side, int], int] = {}
    on_time: list[tuple[Side, str, str, int, int]] = []
    late: set[str] = set()
    for side, key, rid, ts, partition, _offset in by_place:
        clock = clocks.get((side, partition), -1)
        if WINDOW.is_late(ts, clock):
            late.add(rid)
            continue
        clocks[(side, partition)] = max(clock, ts)
        on_time.append((side, key, rid, ts, partition))
    lefts = [r for r in on_time if r[0] is Side.LEFT]
    rights = [r for r in on_time if r[0] is Side.RIGHT]
    expected: Counter[tuple[str, str | None]] = Counter()
    for _, lk, lid, lt, lp in lefts:
        matched = False
        for _, rk, rid, rt, _rp in rights:
            if lk == rk and WINDOW.matches(lt, rt):
                expected[(lid, rid)] += 1
                matched = True
        right_clock = clocks.get((Side.RIGHT, lp), -1)
        if not matched and INDEX.swept(WINDOW.expires_after(Side.LEFT, lt), right_clock):
            expected[(lid, None)] += 1
    return expected, late


def dataset() -> tuple[list[Any], list[Any]]:
    """Orders and payments in two halves; see the cases below. Event times rise with the key."""
    first: list[Any] = []
    second: list[Any] = []
    for i in range(KEYS):
        key = f"order-{i}"
        ts = BASE_MS + i * 50
        order = (Side.LEFT, key, f"o{i}", ts, None)
        case = i % 6
        payments: list[Any] = []
        if case == 0:
            payments = [(Side.RIGHT, key, f"p{i}", ts + 300, None)]  # after the order: joined
        elif case == 1:
            payments = [(Side.RIGHT, key, f"p{i}", ts + 300, None)]  # produced first: joined
        elif case == 3:
            payments = [
                (Side.RIGHT, key, f"p{i}a", ts + 100, None),  # joined
                (Side.RIGHT, key, f"p{i}b", ts + 800, None),  # after the window: not joined
            ]
        elif case == 4:
            payments = [(Side.RIGHT, key, f"p{i}", ts - 100, None)]  # within before_ms: joined
        elif case == 5:
            payments = [(Side.RIGHT, key, f"p{i}", ts - 300, None)]  # before the window
        # case 2: no payment: the order comes out unmatched once the window has passed.
        # The first half: every record of the first quarter of the keys, and the orders of the
        # second quarter, whose payments come after the crash: state the crash must not lose.
        for record in [*payments, order] if case == 1 else [order, *payments]:
            in_first = i < KEYS // 4 or (i < KEYS // 2 and record[0] is Side.LEFT)
            (first if in_first else second).append(record)
    return first, second


@pytest.fixture
def join_topics(kafka_bootstrap: str) -> Iterator[dict[str, str]]:
    app_id = f"it-join-{int(time.time() * 1000) % 10**8}"
    names = {
        "app_id": app_id,
        "orders": f"{app_id}-orders",
        "payments": f"{app_id}-payments",
        "paid": f"{app_id}-paid",
        "late": f"{app_id}-late",
    }
    asyncio.run(
        create_topics(
            kafka_bootstrap,
            {
                names["orders"]: PARTITIONS,
                names["payments"]: PARTITIONS,
                names["paid"]: PARTITIONS,
                names["late"]: 1,
            },
        )
    )
    yield names


@pytest.mark.parametrize("batch", [None, 100], ids=["records", "batches"])
def test_windowed_left_join_survives_sigkill(
    kafka_bootstrap: str, join_topics: dict[str, str], tmp_path: Path, batch: int | None
) -> None:
    environ = env(join_topics["app_id"], JOINIT_KIND="left", **batch_env(batch))
    topics = {Side.LEFT: join_topics["orders"], Side.RIGHT: join_topics["payments"]}
    workers = {
        name: join_worker(kafka_bootstrap, tmp_path / name, {**environ}) for name in ("a", "b")
    }
    produced = Produced()
    first, second = dataset()
    try:
        for worker in workers.values():
            worker.start()
        orders = join_topics["orders"]
        wait_for_workers(
            workers, "both workers to process", lambda: settled(workers, orders), timeout=180
        )
        asyncio.run(produce(kafka_bootstrap, topics, first, produced))
        # Wait until the first quarter's pairs are out: the workers hold state by then.
        wait_for_workers(
            workers,
            "the first pairs",
            lambda: len(asyncio.run(read_all(kafka_bootstrap, join_topics["paid"], 1.0))) >= 50,
            timeout=120,
        )
        # The second half goes in slowly; one worker is killed while it is being processed.
        producing = threading.Thread(
            target=lambda: asyncio.run(
                produce(kafka_bootstrap, topics, second, produced, pause_s=0.01)
            )
        )
        producing.start()
        time.sleep(2.0)
        workers["b"].stop(signal.SIGKILL)
        producing.join()
        # Late records: far behind both sides' clocks in every partition.
        late_records: list[Any] = []
        for p in range(PARTITIONS):
            late_records.append((Side.RIGHT, "order-0", f"late-p{p}", BASE_MS - 100_000, p))
            late_records.append((Side.LEFT, "order-1", f"late-o{p}", BASE_MS - 100_000, p))
        asyncio.run(produce(kafka_bootstrap, topics, late_records, produced))
        workers["b"].start()  # on its data dir: its state and its partitions come back
        wait_for_workers(
            workers, "b back and processing", lambda: settled(workers, orders), timeout=180
        )
        # Both clocks far ahead in every partition, so that every order's window has passed.
        end_ms = BASE_MS + KEYS * 50 + 60_000
        closing = [(Side.RIGHT, f"end-{p}", f"end-p{p}", end_ms, p) for p in range(PARTITIONS)]
        closing += [(Side.LEFT, f"end-{p}", f"end-o{p}", end_ms, p) for p in range(PARTITIONS)]
        asyncio.run(produce(kafka_bootstrap, topics, closing, produced))

        expected, late = reference(produced)
        assert sum(1 for pair in expected if pair[1] is None) > 50  # unmatched orders do occur
        assert late == {f"late-p{p}" for p in range(PARTITIONS)} | {
            f"late-o{p}" for p in range(PARTITIONS)
        }

        def got() -> Counter[tuple[str, str | None]]:
            records = asyncio.run(read_all(kafka_bootstrap, join_topics["paid"], 1.0))
            return Counter((r["value"]["order"], r["value"]["payment"]) for r in records)

        wait_for_workers(
            workers,
            "the whole output",
            lambda: set(got()) >= set(expected),
            timeout=180,
            details=lambda: f"missing: {sorted(set(expected) - set(got()))[:20]}",
        )
        time.sleep(3.0)  # anything that should not be there has had time to come out
        output = got()
        missing = set(expected) - set(output)
        unexpected = set(output) - set(expected)
        duplicated = sum(n - 1 for n in output.values() if n > 1)
        print(
            f"windowed join: {sum(expected.values())} expected, {len(missing)} missing, "
            f"{len(unexpected)} unexpected, {duplicated} duplicated"
        )
        assert not missing and not unexpected
        dead = asyncio.run(read_all(kafka_bootstrap, join_topics["late"], 1.0))
        assert {r["value"]["id"] for r in dead} == late
        assert all(r["headers"]["reason"] == b"late" for r in dead)
        counts: Counter[str] = Counter()
        for worker in workers.values():
            counts.update(worker.get_json("/join/late/"))
        # Each late record counted once, or more if a crash replayed it (at-least-once).
        assert sum(counts.values()) >= len(late), counts
    finally:
        for worker in workers.values():
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()


async def produce_json(
    bootstrap: str, topic: str, records: Sequence[tuple[str, dict[str, Any] | None]]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for key, value in records:
            encoded = None if value is None else json.dumps(value).encode()
            await producer.send(topic, key=key.encode(), value=encoded)
        await producer.flush()
    finally:
        await producer.stop()


@pytest.mark.parametrize(
    ("global_table", "batch"),
    [(False, None), (True, None), (False, 100), (True, 100)],
    ids=["copartitioned", "global", "copartitioned-batches", "global-batches"],
)
def test_stream_table_join_survives_sigkill(
    kafka_bootstrap: str,
    join_topics: dict[str, str],
    tmp_path: Path,
    global_table: bool,
    batch: int | None,
) -> None:
    app_id = join_topics["app_id"]
    shipments, customers, labelled = (
        f"{app_id}-shipments",
        f"{app_id}-customers",
        f"{app_id}-labelled",
    )
    asyncio.run(
        create_topics(
            kafka_bootstrap, {shipments: PARTITIONS, customers: PARTITIONS, labelled: PARTITIONS}
        )
    )
    environ = env(
        app_id,
        JOINIT_TABLE_JOIN="1",
        JOINIT_GLOBAL="1" if global_table else "0",
        **batch_env(batch),
    )
    workers = {name: join_worker(kafka_bootstrap, tmp_path / name, environ) for name in ("a", "b")}
    names = {f"c{i}": f"customer {i}" for i in range(100)}
    try:
        for worker in workers.values():
            worker.start()
        wait_for_workers(
            workers, "both workers to process", lambda: settled(workers, shipments), timeout=180
        )
        table_records: list[tuple[str, dict[str, Any] | None]] = [
            (key, {"name": name}) for key, name in names.items()
        ]
        table_records += [("c5", None)]  # deleted
        table_records += [("c7", {"name": "customer 7, renamed"})]
        asyncio.run(produce_json(kafka_bootstrap, customers, table_records))
        del names["c5"]
        names["c7"] = "customer 7, renamed"

        def table_sizes() -> list[int]:
            return [int(w.get_json("/join/customers/")["count"]) for w in workers.values()]

        filled = (
            (lambda: all(n == len(names) for n in table_sizes()))
            if global_table
            else (lambda: sum(table_sizes()) == len(names))
        )
        wait_for_workers(
            workers,
            "the customers table",
            filled,
            timeout=120,
            details=lambda: f"table sizes: {table_sizes()}, want {len(names)}",
        )

        shipped = [(f"c{i % 120}", {"id": f"s{i}", "ts": i}) for i in range(400)]
        asyncio.run(produce_json(kafka_bootstrap, shipments, shipped[:200]))
        workers["b"].stop(signal.SIGKILL)
        asyncio.run(produce_json(kafka_bootstrap, shipments, shipped[200:]))
        workers["b"].start()
        wait_for_workers(
            workers, "b back and processing", lambda: settled(workers, shipments), timeout=180
        )
        expected = {(value["id"], names.get(key)) for key, value in shipped if value}

        def got() -> Counter[tuple[str, str | None]]:
            records = asyncio.run(read_all(kafka_bootstrap, labelled, 1.0))
            return Counter((r["value"]["shipment"], r["value"]["customer"]) for r in records)

        wait_for_workers(
            workers,
            "the whole output",
            lambda: set(got()) >= expected,
            timeout=180,
            details=lambda: f"missing: {sorted(expected - set(got()))[:20]}",
        )
        time.sleep(3.0)
        output = got()
        duplicated = sum(n - 1 for n in output.values() if n > 1)
        print(
            f"stream-table join ({'global' if global_table else 'co-partitioned'}): "
            f"{len(expected)} expected, {len(expected - set(output))} missing, "
            f"{len(set(output) - expected)} unexpected, {duplicated} duplicated"
        )
        assert set(output) == expected
    finally:
        for worker in workers.values():
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()
