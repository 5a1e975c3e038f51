"""A windowed join, a temporal stream-table join and a session-window aggregate under exactly_once,
through a SIGKILL of one of 2 workers, with undecodable records on every input (the table topic
included): each output equals its batch reference exactly.

The app is tests/integration/apps/shop.py (declared as docs/joins.md's complete example). The
customers table is filled first; then orders, payments, shipments and sales go in two halves,
one of the workers killed with SIGKILL while the second half is produced and processed, and
restarted on its data dir; then late records, and records far ahead in every partition so that
every window and session the data makes has closed.

Each output is read committed and compared with a batch computation over the records produced,
from their partitions and offsets, under the documented rules:

* the left join: the pairs of records that are not late (more than grace behind their side's
  clock), and the orders with no payment;
* the temporal join: each shipment with its customer's name as of its time, over every
  customer record (all produced before the shipments: the interleaving the rule makes exact);
* the sessions: of the sales that are not late, each id counted once, a store's sales cut
  where two are more than the gap apart, summed.

Asserted: 0 missing, 0 duplicated, 0 unexpected for each (the counts are printed); the late
records' dead letters are exactly the late records; the app's dead-letter topic holds exactly
the undecodable records, each naming itself.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from streamapp.bad_records import HEADER_PREFIX
from streamapp.joins.core import ExpiryIndex
from streamapp.joins.window import Side
from streamapp.testing.kafka_io import committed_records, create_topics
from streamapp.testing.worker import WorkerProcess
from tests.integration.apps.shop import PARTITIONS, SESSIONS, WINDOW

from .workers import wait_for_workers

APP = "tests.integration.apps.shop:app"
INDEX = ExpiryIndex()  # the join's default buckets
BASE_MS = 1_700_000_000_000
FAR_MS = BASE_MS + 10_000_000
ORDER_KEYS = 240
CUSTOMERS = 60
SHIPMENTS = 300
STORES = 40

#: Undecodable records, each put on every input: (key, value, stage).
BAD = [
    (b"k1", b"\xff not json", "value-decode"),
    (b"k2", b'{"id": "no-ts"}', "processing"),
    (b"\xff\xfe", b'{"id": "bad-key", "ts": 1}', "key-decode"),
]

Record = tuple[str, bytes | None, bytes | None, int | None, int | None]  # topic key value p ts


@dataclass(frozen=True)
class Placed:
    topic: str
    key: str | None
    value: Any  # decoded JSON, or None
    raw: bytes | None
    partition: int
    offset: int
    timestamp_ms: int
    forced: bool  # produced to a partition given, not the one its key picks


class Shop:
    """One run's topics, and every record produced with where it landed."""

    def __init__(self, app_id: str, bootstrap: str) -> None:
        self.app_id = app_id
        self.bootstrap = bootstrap
        self.placed: list[Placed] = []
        self.lock = threading.Lock()

    def topic(self, name: str) -> str:
        return f"{self.app_id}-{name}"

    def of(self, name: str) -> list[Placed]:
        """The records of a topic that decode (with a key and a ts where one is read), in
        partition and offset order."""
        return sorted(
            (p for p in self.placed if p.topic == self.topic(name) and not _bad(p)),
            key=lambda p: (p.partition, p.offset),
        )

    async def produce(self, records: Sequence[Record], pause_s: float = 0.0) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5)
        await producer.start()
        try:
            for topic, key, value, partition, timestamp_ms in records:
                meta = await (
                    await producer.send(
                        topic, key=key, value=value, partition=partition, timestamp_ms=timestamp_ms
                    )
                )
                decoded = _decode(value)
                with self.lock:
                    self.placed.append(
                        Placed(
                            topic,
                            key.decode(errors="replace") if key is not None else None,
                            decoded,
                            value,
                            meta.partition,
                            meta.offset,
                            meta.timestamp,
                            partition is not None,
                        )
                    )
                if pause_s:
                    await asyncio.sleep(pause_s)
        finally:
            await producer.stop()


def _decode(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return "undecodable"


def _bad(p: Placed) -> bool:
    if p.key is None or "\ufffd" in p.key:
        return True
    if p.value is None:
        return not p.topic.endswith("-customers")  # a deletion, on the table topic only
    return p.value == "undecodable" or "ts" not in p.value


def _json(**value: Any) -> bytes:
    return json.dumps(value).encode()


# -- the data --


def customers(shop: Shop) -> list[Record]:
    """Every customer at BASE, a third renamed 4 s later, a fifth deleted 7 s later; then a
    poisoned record after good ones of five keys, and the other bad ones."""
    topic = shop.topic("customers")
    out: list[Record] = []
    for i in range(CUSTOMERS):
        key = f"c{i}".encode()
        out.append((topic, key, _json(id=f"c{i}", ts=BASE_MS, name=f"customer {i}"), None, None))
        if i % 3 == 0:
            renamed = _json(id=f"c{i}", ts=BASE_MS + 4_000, name=f"customer {i}, renamed")
            out.append((topic, key, renamed, None, None))
        if i % 5 == 0:
            out.append((topic, key, None, None, BASE_MS + 7_000))  # deleted then
    out += [(topic, f"c{i}".encode(), b"\xff poison", None, None) for i in range(5)]
    out += [(topic, k, v, None, None) for k, v, _stage in BAD]
    return out


def orders_and_payments(shop: Shop) -> tuple[list[Record], list[Record]]:
    """As tests/integration/test_joins.py's: per key an order and, by the key's case, payments
    before, within and after its window; the bad records among them. Two halves: the first
    holds the first quarter of the keys and the orders of the second quarter."""
    orders, payments = shop.topic("orders"), shop.topic("payments")
    first: list[Record] = []
    second: list[Record] = []
    for i in range(ORDER_KEYS):
        key = f"order-{i}".encode()
        ts = BASE_MS + i * 50
        order = (orders, key, _json(id=f"o{i}", ts=ts), None, None)
        offsets = {0: [300], 1: [300], 3: [100, 800], 4: [-100], 5: [-300]}.get(i % 6, [])
        pays = [
            (payments, key, _json(id=f"p{i}-{n}", ts=ts + d), None, None)
            for n, d in enumerate(offsets)
        ]
        for record in [*pays, order] if i % 6 == 1 else [order, *pays]:
            in_first = i < ORDER_KEYS // 4 or (i < ORDER_KEYS // 2 and record[0] == orders)
            (first if in_first else second).append(record)
    for topic in (orders, payments):
        bad = [(topic, k, v, None, None) for k, v, _stage in BAD]
        first[len(first) // 2 : len(first) // 2] = bad
    return first, second


def shipments(shop: Shop) -> list[Record]:
    topic = shop.topic("shipments")
    out: list[Record] = [
        (
            topic,
            f"c{i % 70}".encode(),
            _json(id=f"s{i}", ts=BASE_MS + (i * 37) % 10_000),
            None,
            None,
        )
        for i in range(SHIPMENTS)
    ]
    out[SHIPMENTS // 3 : SHIPMENTS // 3] = [(topic, k, v, None, None) for k, v, _s in BAD]
    return out


def sales(shop: Shop) -> list[Record]:
    """Per store, a block of sales 3 s after the previous store's: at 0 and 400 ms, the one at
    400 delivered twice, one at 1900 (a second session), then one at 1100 that merges the two
    (most stores); every fourth store a sale 2.5 s before its block, late."""
    topic = shop.topic("sales")
    out: list[Record] = []
    for j in range(STORES):
        base = BASE_MS + 20_000 + j * 3_000
        block = [("a", 0, 1), ("b", 400, 2), ("b", 400, 2), ("c", 1_900, 4)]
        if j % 3 != 1:
            block.append(("d", 1_100, 8))  # within a gap of both: one session
        if j % 4 == 0:
            block.append(("late", -2_500, 16))
        out += [
            (topic, f"store-{j}".encode(), _json(id=f"{j}-{n}", ts=base + dt, amount=a), None, None)
            for n, dt, a in block
        ]
    out[len(out) // 3 : len(out) // 3] = [(topic, k, v, None, None) for k, v, _s in BAD]
    return out


def closing(shop: Shop) -> list[Record]:
    """Late orders and payments (far behind), then records far ahead on every input in every
    partition: every window and session closes, every unmatched order comes out."""
    out: list[Record] = []
    for p in range(PARTITIONS):
        for name in ("orders", "payments"):
            late = _json(id=f"late-{name}-{p}", ts=BASE_MS - 100_000)
            out.append((shop.topic(name), b"order-0", late, p, None))
    for p in range(PARTITIONS):
        for name in ("orders", "payments", "sales"):
            far = _json(id=f"far-{name}-{p}", ts=FAR_MS, amount=0)
            out.append((shop.topic(name), f"far-{p}".encode(), far, p, None))
    return out


# -- the batch references --


def reference_join(shop: Shop) -> tuple[Counter[tuple[str, str | None]], set[str]]:
    """The left join of the orders and payments that are not late; the late ones' ids."""
    sides = {shop.topic("orders"): Side.LEFT, shop.topic("payments"): Side.RIGHT}
    clocks: dict[tuple[Side, int], int] = {}
    on_time: list[tuple[Side, Placed]] = []
    late: set[str] = set()
    for p in shop.of("orders") + shop.of("payments"):
        side = sides[p.topic]
        clock = clocks.get((side, p.partition), -1)
        if WINDOW.is_late(p.value["ts"], clock):
            late.add(p.value["id"])
            continue
        clocks[(side, p.partition)] = max(clock, p.value["ts"])
        on_time.append((side, p))
    lefts = [p for side, p in on_time if side is Side.LEFT]
    rights = [p for side, p in on_time if side is Side.RIGHT]
    expected: Counter[tuple[str, str | None]] = Counter()
    for o in lefts:
        matches = [
            r for r in rights if r.key == o.key and WINDOW.matches(o.value["ts"], r.value["ts"])
        ]
        for r in matches:
            expected[(o.value["id"], r.value["id"])] += 1
        right_clock = clocks.get((Side.RIGHT, o.partition), -1)
        expires = WINDOW.expires_after(Side.LEFT, o.value["ts"])
        if not matches and INDEX.swept(expires, right_clock):
            expected[(o.value["id"], None)] += 1
    return expected, late


def reference_labels(shop: Shop) -> Counter[tuple[str, str | None]]:
    """Each shipment with its customer's name as of its time (None: no customer then)."""
    versions: dict[str, list[tuple[int, int, str | None]]] = {}
    for c in shop.of("customers"):
        assert c.key is not None
        time_ms = c.value["ts"] if c.value is not None else c.timestamp_ms
        name = c.value["name"] if c.value is not None else None
        versions.setdefault(c.key, []).append((time_ms, c.offset, name))
    out: Counter[tuple[str, str | None]] = Counter()
    for s in shop.of("shipments"):
        assert s.key is not None
        valid = [v for v in versions.get(s.key, []) if v[0] <= s.value["ts"]]
        out[(s.value["id"], max(valid)[2] if valid else None)] += 1
    return out


def reference_sessions(shop: Shop) -> tuple[Counter[tuple[str, int, int, int]], set[str]]:
    """Per store, the sessions of its sales that are not late, each id once, summed; those the
    final clock of the store's partition has closed. And the late sales' ids."""
    clocks: dict[int, int] = {}
    late: set[str] = set()
    kept: dict[tuple[str, int], dict[str, tuple[int, int]]] = {}
    for s in shop.of("sales"):
        assert s.key is not None
        t = s.value["ts"]
        clock = clocks.get(s.partition, -(2**62))
        if SESSIONS.is_late(t, clock):
            late.add(s.value["id"])
            continue
        clocks[s.partition] = max(clock, t)
        # A sale delivered twice: the same id and time, the first of them in an open session.
        kept.setdefault((s.key, s.partition), {}).setdefault(s.value["id"], (t, s.value["amount"]))
    out: Counter[tuple[str, int, int, int]] = Counter()
    for (store, partition), by_id in kept.items():
        times = sorted(by_id.values())
        run = [times[0]]
        for t, amount in [*times[1:], (None, 0)]:
            if t is None or t - run[-1][0] > SESSIONS.gap_ms:
                first, last = run[0][0], run[-1][0]
                if clocks[partition] >= SESSIONS.closes_at(last):
                    out[(store, first, last + 1, sum(a for _, a in run))] += 1
                run = []
            if t is not None:
                run.append((t, amount))
    return out, late


# -- the run --


def _settled(workers: dict[str, WorkerProcess], topic: str) -> bool:
    held = []
    for worker in workers.values():
        view = worker.get_json("/streamapp/assignment")
        if not view["history"] or view["history"][-1]["plan_generation"] != view["plan_generation"]:
            return False
        held += view["active"].get(topic, [])
    return sorted(held) == list(range(PARTITIONS))


def _read(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> list[Any]:
    return asyncio.run(committed_records(bootstrap, topic, partitions))


def _diff(want: Counter[Any], got: Counter[Any]) -> tuple[int, int, int]:
    """(missing, duplicated, unexpected) of ``got`` against ``want``."""
    missing = sum((want - got).values())
    duplicated = sum(n - want[k] for k, n in got.items() if k in want and n > want[k])
    unexpected = sum(n for k, n in got.items() if k not in want)
    return missing, duplicated, unexpected


def test_each_output_equals_its_batch_reference_through_a_sigkill(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    shop = Shop(f"it-shop-{int(time.time() * 1000) % 10**8}", kafka_bootstrap)
    names = ["orders", "payments", "shipments", "customers", "sales", "paid", "labelled"]
    asyncio.run(
        create_topics(
            kafka_bootstrap,
            {
                **{shop.topic(n): PARTITIONS for n in [*names, "sessions"]},
                **{shop.topic(n): 1 for n in ("orders-late", "sales-late", "dead-letters")},
            },
        )
    )
    environ = {"SHOP_APP_ID": shop.app_id}
    workers = {n: WorkerProcess(APP, kafka_bootstrap, tmp_path / n, env=environ) for n in "ab"}
    try:
        for worker in workers.values():
            worker.start()
        orders = shop.topic("orders")
        wait_for_workers(
            workers, "both workers to process", lambda: _settled(workers, orders), timeout=180
        )
        asyncio.run(shop.produce(customers(shop)))
        keys = len({c.key for c in shop.of("customers")})

        def held_customers() -> int:
            return sum(w.get_json("/shop/customers/")["keys"] for w in workers.values())

        wait_for_workers(
            workers,
            "the customers table",
            lambda: held_customers() == keys,
            timeout=120,
            details=lambda: f"{held_customers()} of {keys} customers held",
        )
        first, second = orders_and_payments(shop)
        rest = shipments(shop) + sales(shop)
        half = len(rest) // 2
        asyncio.run(shop.produce(first + rest[:half]))
        wait_for_workers(
            workers,
            "the first outputs",
            lambda: len(_read(kafka_bootstrap, shop.topic("paid"))) >= 30,
            timeout=120,
        )
        # The second half goes in slowly; one worker is killed while it is being processed.
        producing = threading.Thread(
            target=lambda: asyncio.run(shop.produce(second + rest[half:], pause_s=0.005))
        )
        producing.start()
        time.sleep(2.0)
        workers["b"].stop(signal.SIGKILL)
        producing.join()
        asyncio.run(shop.produce(closing(shop)))
        workers["b"].start()  # on its data dir: its state and its partitions come back
        wait_for_workers(
            workers, "b back and processing", lambda: _settled(workers, orders), timeout=180
        )

        pairs, late_orders = reference_join(shop)
        labels = reference_labels(shop)
        totals, late_sales = reference_sessions(shop)
        # The data does what it is there for.
        assert sum(1 for pair in pairs if pair[1] is None) > 30  # unmatched orders
        assert len(late_orders) == 2 * PARTITIONS and len(late_sales) == STORES // 4
        assert sum(1 for label in labels if label[1] and "renamed" in label[1]) > 10
        assert sum(1 for label in labels if label[1] is None) > 30  # deleted, or unknown
        merged = [t for t in totals if t[3] == 1 + 2 + 4 + 8]  # a, b once, c and d: merged
        assert len(merged) > STORES // 2

        def outputs() -> dict[str, Counter[Any]]:
            paid = _read(kafka_bootstrap, shop.topic("paid"))
            labelled = _read(kafka_bootstrap, shop.topic("labelled"))
            sessions = _read(kafka_bootstrap, shop.topic("sessions"))
            return {
                "windowed join": Counter(
                    (v["order"], v["payment"]) for v in (json.loads(r.value) for r in paid)
                ),
                "temporal join": Counter(
                    (v["shipment"], v["customer"]) for v in (json.loads(r.value) for r in labelled)
                ),
                "session aggregate": Counter(
                    (r.key.decode(), v["start"], v["end"], v["value"])
                    for r, v in ((r, json.loads(r.value)) for r in sessions)
                ),
            }

        want = {"windowed join": pairs, "temporal join": labels, "session aggregate": totals}

        def complete() -> bool:
            got = outputs()
            return all(sum(got[n].values()) >= sum(w.values()) for n, w in want.items())

        wait_for_workers(
            workers,
            "every output",
            complete,
            timeout=240,
            details=lambda: str({n: _diff(w, outputs()[n]) for n, w in want.items()}),
        )
        time.sleep(3.0)  # anything that should not be there has had time to come out
        got = outputs()
        report = {name: _diff(want[name], got[name]) for name in want}
        for name, (missing, duplicated, unexpected) in report.items():
            print(
                f"{name}: {sum(want[name].values())} expected, {missing} missing, "
                f"{duplicated} duplicated, {unexpected} unexpected"
            )
        assert report == {name: (0, 0, 0) for name in want}

        # Each output record in the partition of its source records (the output topics are
        # declared like the sources: the same key codec and partition count).
        partition_of = {p.key: p.partition for p in shop.placed if not p.forced and not _bad(p)}
        placed_outputs = [
            (r.key.decode(), r.partition)
            for name in ("paid", "labelled", "sessions")
            for r in _read(kafka_bootstrap, shop.topic(name))
        ]
        checked = [(k, p) for k, p in placed_outputs if k in partition_of]
        assert len(checked) > 500
        assert all(partition_of[k] == p for k, p in checked)

        # Late records: their dead letters are exactly them.
        late_letters = {
            json.loads(r.value)["id"] for r in _read(kafka_bootstrap, shop.topic("orders-late"), 1)
        }
        assert late_letters == late_orders
        sales_letters = [
            json.loads(r.value)["id"] for r in _read(kafka_bootstrap, shop.topic("sales-late"), 1)
        ]
        assert sorted(sales_letters) == sorted(late_sales)
        # Undecodable records: each in the app's dead-letter topic once, naming itself.
        dead = []
        for r in _read(kafka_bootstrap, shop.topic("dead-letters"), 1):
            h = {k.removeprefix(HEADER_PREFIX): v.decode() for k, v in r.headers}
            dead.append((h["topic"], int(h["partition"]), int(h["offset"])))
        bad = [(p.topic, p.partition, p.offset) for p in shop.placed if _bad(p)]
        assert len(bad) == 5 * len(BAD) + 5
        assert sorted(dead) == sorted(bad)
    finally:
        for worker in workers.values():
            if worker.alive():
                worker.stop()
