"""An agent over batches (streamapp.batches) on a real broker, through a SIGKILL.

One `streamapp worker` of apps/batch_counter.py counts events per key in batches and sends
``<seq>:<count>`` per event; it is killed with SIGKILL while it processes, then restarted on
the same data dir. Under exactly_once every key's count is exactly its number of events, and
the committed output (read_committed) holds each event once, and per key the counts 1..n in
order: nothing lost, nothing repeated, with batches of many records acked once each. Under
at-least-once every event's output is there and no count is short: nothing lost. Every wait is
on content; nothing asserts on how long anything took.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path

from streamapp.testing.kafka_io import (
    ProducedAroundAKill,
    committed_records,
    create_topics,
    produce,
)
from streamapp.testing.worker import WorkerProcess

from .apps.batch_counter import PARTITIONS

APP = "tests.integration.apps.batch_counter:app"
KEYS = 40
FIRST = range(0, 3_000)
SECOND = range(3_000, 12_000)
ALL = (*FIRST, *SECOND)


def key_of(seq: int) -> str:
    return f"k{seq % KEYS}"


async def output_of(bootstrap: str, topic: str) -> dict[str, list[tuple[int, int]]]:
    """Every committed record of ``topic``: key -> [(seq, count), ...] in offset order."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for record in await committed_records(bootstrap, topic, PARTITIONS):
        seq, count = record.value.decode().split(":")
        out[record.key.decode()].append((int(seq), int(count)))
    return out


def run_through_sigkill(bootstrap: str, tmp_path: Path, guarantee: str) -> tuple[dict, dict]:
    """Events in two parts, a SIGKILL during the second, a restart; the worker's last view and
    the committed output once it has processed (at least) every event and stopped."""
    app_id = f"it-batch-{guarantee[:3]}-{int(time.time() * 1000) % 10**8}"
    events, counts_topic = f"{app_id}-events", f"{app_id}-counts"
    asyncio.run(create_topics(bootstrap, {events: PARTITIONS, counts_topic: PARTITIONS}))
    env = {"BATCH_APP_ID": app_id, "BATCH_GUARANTEE": guarantee}
    worker = WorkerProcess(APP, bootstrap, tmp_path / "w", env=env)
    try:
        worker.start()
        worker.wait_for("/counts/", lambda view: isinstance(view, dict), timeout=180)
        asyncio.run(produce(bootstrap, events, FIRST, key_of))
        worker.wait_for("/counts/", lambda v: sum(v["counts"].values()) >= len(FIRST))
        with ProducedAroundAKill(bootstrap, events, SECOND, key_of, before_kill=4_000) as second:
            seen = worker.wait_for(
                "/counts/", lambda v: sum(v["counts"].values()) >= len(FIRST) + 800
            )
            worker.stop(signal.SIGKILL)
            second.killed()
        assert sum(seen["counts"].values()) < len(ALL), "killed after the end"

        worker.start()
        expected = Counter(key_of(seq) for seq in ALL)
        view = worker.wait_for(
            "/counts/",
            lambda v: all(v["counts"].get(k, 0) >= n for k, n in expected.items()),
            timeout=240,
        )
        if guarantee == "at_least_once":
            # Counts may run ahead of the events (a record processed twice) before the last
            # one is processed: wait for the output of every event.
            deadline = time.monotonic() + 240
            while True:
                output = asyncio.run(output_of(bootstrap, counts_topic))
                if {s for pairs in output.values() for s, _ in pairs} >= set(ALL):
                    break
                assert time.monotonic() < deadline, "output of some events never came"
                time.sleep(1.0)
        view = worker.get_json("/counts/")
        assert view["largest"] > 1, view  # batches, not records one by one
        assert view["by_partition"] > 0, view  # a fetch's records a partition at a time
        assert worker.stop() == 0, worker.log_tail()
        return view, asyncio.run(output_of(bootstrap, counts_topic))
    finally:
        if worker.alive():
            worker.kill()


def test_exactly_once_counts_and_output_through_a_sigkill(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    view, output = run_through_sigkill(kafka_bootstrap, tmp_path, "exactly_once")
    expected = Counter(key_of(seq) for seq in ALL)
    assert view["counts"] == dict(expected)
    assert set(output) == set(expected)
    for key, pairs in output.items():
        assert [count for _, count in pairs] == list(range(1, expected[key] + 1)), key
        seqs = [seq for seq, _ in pairs]
        assert seqs == sorted(seqs), key  # one partition per key: in offset order
        assert set(seqs) == {s for s in ALL if key_of(s) == key}, key


def test_at_least_once_loses_nothing_through_a_sigkill(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    view, output = run_through_sigkill(kafka_bootstrap, tmp_path, "at_least_once")
    expected = Counter(key_of(seq) for seq in ALL)
    for key, n in expected.items():
        assert view["counts"][key] >= n, key
        assert {seq for seq, _ in output[key]} == {s for s in ALL if key_of(s) == key}, key
