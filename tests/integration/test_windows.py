"""Windowed aggregates on a real broker, with `streamapp worker` processes of apps/windows.py.

1. Exact per window across a SIGKILL: 2 workers count clicks in tumbling windows and sum them
   in hopping windows; one is killed with SIGKILL while the second half is processed, and
   restarted. Every window's final result is compared with a batch computation of what was
   produced (from the produced records' partitions and offsets, with the windows' grace and
   lateness rules): the set of (key, window, value) equals the reference exactly, each window
   has one value (at-least-once may repeat a result, never change it), and the dead letters
   are exactly the late records.
2. faust-streaming/faust #385 (windows that never expire after a RocksDB recovery), for
   streamapp's aggregates: a worker builds windows, is stopped (SIGTERM or SIGKILL) and
   restarted on its data dir, so its windows come back from RocksDB and the changelog; then
   event time moves past them, and they are emitted and gone, from the worker's table and,
   once it has stopped, from its RocksDB files.
3. The same case for Faust's own windowed table (``app.Table(...).tumbling(...)``) on a
   ``streamapp.App``, which Faust expires by the wall clock from an in-memory heap.

Every wait is on content (an output, a web view); nothing asserts on how long anything took.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import rocksdict
from aiokafka import AIOKafkaProducer

from streamapp.aggregates import Windows
from streamapp.testing.worker import WorkerProcess

from .test_joins import create_topics, read_all, settled
from .workers import wait_for_workers

APP = "tests.integration.apps.windows:app"
PARTITIONS = 4
TUMBLING = Windows.tumbling(1_000, grace_ms=500)  # as the app's
HOPPING = Windows.hopping(1_000, 500, grace_ms=500)
BASE_MS = 1_700_000_000_000
USERS = 40


def windows_worker(bootstrap: str, data_dir: Path, environ: dict[str, str]) -> WorkerProcess:
    """A worker of apps/windows.py with its own ``WINIT_*`` environment."""
    return WorkerProcess(APP, bootstrap, data_dir, env=environ)


# (key, id, ts, n, partition or None) in; (key, id, ts, n, partition, offset) out.
Click = tuple[str, str, int, int, int | None]
Placed = tuple[str, str, int, int, int, int]


async def produce(
    bootstrap: str,
    topic: str,
    clicks: Sequence[Click],
    placed: list[Placed],
    *,
    pause_s: float = 0.0,
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for key, cid, ts, n, partition in clicks:
            value = json.dumps({"id": cid, "ts": ts, "n": n}).encode()
            # The Kafka timestamp is the event time too (Faust's windowed table reads it).
            sent = await producer.send(
                topic, value=value, key=key.encode(), partition=partition, timestamp_ms=ts
            )
            meta = await sent
            placed.append((key, cid, ts, n, meta.partition, meta.offset))
            if pause_s:
                await asyncio.sleep(pause_s)
    finally:
        await producer.stop()


def reference(
    windows: Windows, placed: Sequence[Placed], weight: bool
) -> tuple[dict[tuple[str, int], int], set[str]]:
    """Batch result of the closed windows, ``(key, start) -> count or sum``, and the late ids.

    Per partition in offset order: the clock is the highest event time so far; a record goes
    into its windows that the clock has not closed; a window is final once the partition's
    last clock has closed it.
    """
    by_partition: dict[int, list[Placed]] = defaultdict(list)
    for record in sorted(placed, key=lambda r: (r[4], r[5])):
        by_partition[record[4]].append(record)
    closed: dict[tuple[str, int], int] = {}
    late: set[str] = set()
    for records in by_partition.values():
        clock = -(2**62)
        values: dict[tuple[str, int], int] = defaultdict(int)
        for key, cid, ts, n, _p, _o in records:
            clock = max(clock, ts)
            starts = windows.open_starts(ts, clock)
            if not starts:
                late.add(cid)
            for start in starts:
                values[(key, start)] += n if weight else 1
        closed.update({kw: v for kw, v in values.items() if windows.is_closed(kw[1], clock)})
    return closed, late


def results(bootstrap: str, topic: str) -> list[tuple[str, int, int]]:
    return [
        (r["key"], int(r["value"]["start"]), int(r["value"]["value"]))
        for r in asyncio.run(read_all(bootstrap, topic, 1.0))
    ]


def describe_missing(
    want: set[tuple[str, int, int]], got: list[tuple[str, int, int]], placed: Sequence[Placed]
) -> str:
    """The first missing results, what came out for those windows instead, and their records."""
    missing = sorted(want - set(got))[:5]
    lines = [f"{len(want - set(got))} missing of {len(want)}"]
    for key, start, value in missing:
        instead = [v for k, s, v in got if (k, s) == (key, start)]
        records = [(c, ts, p, o) for k, c, ts, _n, p, o in placed if k == key and ts >= start]
        lines.append(f"{key}@{start}={value}: got {instead}; records {records[:4]}")
    return "\n".join(lines)


def dataset() -> tuple[list[Click], list[Click]]:
    """Clicks of USERS users over ~30 s of event time, some out of order within the grace."""
    first: list[Click] = []
    second: list[Click] = []
    for i in range(1_200):
        ts = BASE_MS + i * 25
        if i % 7 == 3:
            ts -= 400  # behind the clock, within the grace of at least one window
        click = (f"user-{i % USERS}", f"c{i}", ts, 1 + i % 5, None)
        (first if i < 600 else second).append(click)
    return first, second


@pytest.fixture
def app_id() -> str:
    return f"it-win-{int(time.time() * 1000) % 10**8}"


#: The topics keep their records whatever their timestamps. The clicks carry their event
#: time, from 2023 (BASE_MS), as their Kafka timestamp; under the broker's default retention
#: (7 days, by the newest timestamp of a segment) every segment of the clicks was deleted at
#: the broker's first retention check, 30 s after it started, and every 5 min after. When that
#: check fell between a SIGKILL and the new owner's catching up, the records it had not read
#: yet were gone: aiokafka found the committed offset out of range, reset to the new log start,
#: and their windows were never emitted (2 runs in 3 failed so).
KEEP_RECORDS = {"retention.ms": "-1"}


def make_topics(bootstrap: str, app_id: str) -> None:
    asyncio.run(
        create_topics(
            bootstrap,
            {
                f"{app_id}-clicks": PARTITIONS,
                f"{app_id}-counts": PARTITIONS,
                f"{app_id}-sums": PARTITIONS,
                f"{app_id}-late": 1,
            },
            KEEP_RECORDS,
        )
    )


def stop_all(workers: dict[str, WorkerProcess]) -> None:
    for worker in workers.values():
        if worker.process is not None and worker.process.poll() is None:
            worker.stop()


def test_windowed_aggregates_exact_across_sigkill(
    kafka_bootstrap: str, app_id: str, tmp_path: Path
) -> None:
    make_topics(kafka_bootstrap, app_id)
    clicks = f"{app_id}-clicks"
    environ = {"WINIT_APP_ID": app_id, "WINIT_PARTITIONS": str(PARTITIONS)}
    workers = {n: windows_worker(kafka_bootstrap, tmp_path / n, environ) for n in ("a", "b")}
    placed: list[Placed] = []
    first, second = dataset()
    try:
        for worker in workers.values():
            worker.start()
        wait_for_workers(
            workers, "both workers to process", lambda: settled(workers, clicks), timeout=180
        )
        asyncio.run(produce(kafka_bootstrap, clicks, first, placed))
        wait_for_workers(
            workers,
            "the first windows",
            lambda: len(results(kafka_bootstrap, f"{app_id}-counts")) >= 50,
            timeout=120,
        )
        producing = threading.Thread(
            target=lambda: asyncio.run(
                produce(kafka_bootstrap, clicks, second, placed, pause_s=0.01)
            )
        )
        producing.start()
        time.sleep(2.0)  # into the second half: b is killed while it processes
        workers["b"].stop(signal.SIGKILL)
        producing.join()
        # Late: far behind every partition's clock, in every window of both kinds.
        late_clicks: list[Click] = [
            ("user-0", f"late-{p}", BASE_MS - 100_000, 1, p) for p in range(PARTITIONS)
        ]
        asyncio.run(produce(kafka_bootstrap, clicks, late_clicks, placed))
        workers["b"].start()
        wait_for_workers(
            workers, "b back and processing", lambda: settled(workers, clicks), timeout=180
        )
        # Every partition's clock far ahead: every window of the data closes.
        end_ms = BASE_MS + 120_000
        closing: list[Click] = [(f"end-{p}", f"end-{p}", end_ms, 0, p) for p in range(PARTITIONS)]
        asyncio.run(produce(kafka_bootstrap, clicks, closing, placed))

        for topic, windows, weight in (("counts", TUMBLING, False), ("sums", HOPPING, True)):
            expected, late = reference(windows, placed, weight)
            assert late == {f"late-{p}" for p in range(PARTITIONS)}
            assert len(expected) > 500
            want = {(k, s, v) for (k, s), v in expected.items()}
            wait_for_workers(
                workers,
                f"every {topic} window",
                lambda t=topic, w=want: set(results(kafka_bootstrap, f"{app_id}-{t}")) >= w,
                timeout=180,
                details=lambda t=topic, w=want: describe_missing(
                    w, results(kafka_bootstrap, f"{app_id}-{t}"), placed
                ),
            )
        time.sleep(3.0)  # anything that should not be there has had time to come out
        for topic, windows, weight in (("counts", TUMBLING, False), ("sums", HOPPING, True)):
            expected, _late = reference(windows, placed, weight)
            got = results(kafka_bootstrap, f"{app_id}-{topic}")
            distinct = set(got)
            print(
                f"{topic}: {len(expected)} windows expected, {len(got)} results, "
                f"{len(got) - len(distinct)} repeated"
            )
            assert distinct == {(k, s, v) for (k, s), v in expected.items()}
            # One value per window: a repeat (at-least-once) is the same result, never another.
            assert len({(k, s) for k, s, _v in distinct}) == len(distinct)
        dead = asyncio.run(read_all(kafka_bootstrap, f"{app_id}-late", 1.0))
        assert {r["value"]["id"] for r in dead} == {f"late-{p}" for p in range(PARTITIONS)}
        assert all(r["headers"]["reason"] == b"late" for r in dead)
        views = [w.get_json("/windows/") for w in workers.values()]
        assert sum(sum(v["late"].values()) for v in views) >= PARTITIONS
        # Only the closing records' windows are held, nothing of the data.
        held = {key for v in views for key in (*v["counts"], *v["sums"])}
        assert held == {f"end-{p}" for p in range(PARTITIONS)}
    finally:
        stop_all(workers)


def store_keys(data_dir: Path, table: str) -> list[str]:
    """Every key in the worker's RocksDB stores of ``table`` (read once the worker stopped)."""
    keys: list[str] = []
    paths = sorted(data_dir.rglob(f"{table}-*.db"))
    assert paths, f"no RocksDB store of {table} under {data_dir}"
    for path in paths:
        db = rocksdict.Rdict(
            str(path),
            options=rocksdict.Options(raw_mode=True),
            access_type=rocksdict.AccessType.read_only(),
        )
        try:
            # keys(), not iteration: a raw-mode Rdict iterates by index lookups, which it refuses.
            keys.extend(bytes(k).decode(errors="replace") for k in db.keys())  # noqa: SIM118
        finally:
            db.close()
    return keys


def build_windows(worker: WorkerProcess, bootstrap: str, app_id: str, placed: list[Placed]) -> None:
    """Open windows for ``user-*``: every click within [BASE, BASE+900), all still open."""
    clicks = [(f"user-{i}", f"c{i}", BASE_MS + 100 + i * 20, 1, None) for i in range(USERS)]
    asyncio.run(produce(bootstrap, f"{app_id}-clicks", clicks, placed))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_recovered_windows_expire(
    kafka_bootstrap: str, app_id: str, tmp_path: Path, sig: signal.Signals
) -> None:
    make_topics(kafka_bootstrap, app_id)
    clicks = f"{app_id}-clicks"
    environ = {"WINIT_APP_ID": app_id, "WINIT_PARTITIONS": str(PARTITIONS)}
    data_dir = tmp_path / "w"
    worker = windows_worker(kafka_bootstrap, data_dir, environ)
    workers = {"w": worker}
    placed: list[Placed] = []
    users = {f"user-{i}" for i in range(USERS)}

    def view() -> dict[str, Any]:
        return dict(worker.get_json("/windows/"))

    try:
        worker.start()
        wait_for_workers(workers, "the worker", lambda: settled(workers, clicks), timeout=180)
        build_windows(worker, kafka_bootstrap, app_id, placed)
        wait_for_workers(
            workers, "the windows", lambda: set(view()["counts"]) == users, timeout=120
        )
        before = view()
        worker.stop(sig)
        worker.start()  # on its data dir: RocksDB, then the changelog past it
        wait_for_workers(workers, "the restart", lambda: settled(workers, clicks), timeout=180)
        # Recovered: the same windows, the same values, nothing emitted yet.
        assert view()["counts"] == before["counts"]
        assert view()["sums"] == before["sums"]
        assert results(kafka_bootstrap, f"{app_id}-counts") == []
        # Event time moves past every window, in every partition.
        later = [(f"end-{p}", f"end-{p}", BASE_MS + 10_000, 0, p) for p in range(PARTITIONS)]
        asyncio.run(produce(kafka_bootstrap, clicks, later, placed))
        want_counts = {(u, BASE_MS, 1) for u in users}
        wait_for_workers(
            workers,
            "the recovered windows' results",
            lambda: set(results(kafka_bootstrap, f"{app_id}-counts")) >= want_counts,
            timeout=120,
        )
        expected_sums, _ = reference(HOPPING, placed, weight=True)
        wait_for_workers(
            workers,
            "the recovered hopping windows' results",
            lambda: (
                set(results(kafka_bootstrap, f"{app_id}-sums"))
                >= {(k, s, v) for (k, s), v in expected_sums.items()}
            ),
            timeout=120,
        )
        # Gone from the table.
        after = view()
        assert set(after["counts"]) == set(after["sums"]) == {f"end-{p}" for p in range(PARTITIONS)}
        worker.stop()
        # Gone from the store: no window of a user, no index entry of their windows.
        for table in ("counts-windows", "sums-windows"):
            keys = store_keys(data_dir, table)
            assert keys, table
            window_keys = [k for k in keys if k.startswith('"k/')]
            assert len(window_keys) <= PARTITIONS  # the end-<p> keys only
            assert not [k for k in keys if k.startswith('"~w/') and str(BASE_MS) in k]
    finally:
        stop_all(workers)


def test_faust_windowed_table_expires_after_recovery(
    kafka_bootstrap: str, app_id: str, tmp_path: Path
) -> None:
    """faust-streaming/faust #385 on a streamapp.App: Faust's windowed table, recovered.

    Faust expires its windowed tables by the wall clock, every ``table_cleanup_interval``,
    from a heap filled by writes. The clicks here are from 2023, so their windows (1 s, kept
    60 s) are stale for the wall clock at once. The first run cleans up once an hour: the
    windows are still there when it stops. The second run cleans up every second: a window
    written after the restart goes at the first cleanup; the recovered ones must go with it.
    """
    make_topics(kafka_bootstrap, app_id)
    clicks = f"{app_id}-clicks"
    environ = {
        "WINIT_APP_ID": app_id,
        "WINIT_PARTITIONS": str(PARTITIONS),
        "WINIT_FAUST_WINDOWED": "1",
        "WINIT_CLEANUP_S": "3600",
    }
    data_dir = tmp_path / "w"
    worker = windows_worker(kafka_bootstrap, data_dir, environ)
    workers = {"w": worker}
    placed: list[Placed] = []
    users = {f"user-{i}" for i in range(USERS)}

    def faust_windows() -> set[str]:
        return {key for key, _window in worker.get_json("/faust-windows/")["windows"]}

    try:
        worker.start()
        wait_for_workers(workers, "the worker", lambda: settled(workers, clicks), timeout=180)
        build_windows(worker, kafka_bootstrap, app_id, placed)
        wait_for_workers(workers, "the windows", lambda: faust_windows() == users, timeout=120)
        worker.stop()
        worker.env = {**environ, "WINIT_CLEANUP_S": "1"}
        worker.start()
        wait_for_workers(workers, "the restart", lambda: settled(workers, clicks), timeout=180)
        assert faust_windows() == users  # recovered
        fresh = [("fresh", "fresh", BASE_MS + 500, 1, None)]
        asyncio.run(produce(kafka_bootstrap, clicks, fresh, placed))
        # The fresh window was written (the aggregate beside it saw the click: both agents
        # read the same topic) and is gone: a cleanup ran after it.
        wait_for_workers(
            workers,
            "a cleanup after the fresh window",
            lambda: (
                "fresh" in worker.get_json("/windows/")["counts"]
                and "fresh" in worker.get_json("/faust-windows/")["seen"]
                and "fresh" not in faust_windows()
            ),
            timeout=120,
        )
        assert faust_windows() == set(), "recovered windows never expired (faust #385)"
    finally:
        stop_all(workers)
