"""The fetch loop's hand-out of a round's records in one step (streamapp.runtime.loop), on a
real broker.

One `streamapp worker` of apps/eager_counter.py (exactly_once) counts events per key and sends
each key's new count, and is killed with SIGKILL while it processes, then restarted on the same
data dir. Afterwards every key's count is exactly the number of its events, and the committed
output holds, per key, the counts 1, 2, ..., n once each and in order: nothing lost, nothing
repeated, through records handed out without a task of their own (the worker's view says how
many were). Every wait is on content; nothing asserts on how long anything took.
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

from .apps.eager_counter import PARTITIONS

APP = "tests.integration.apps.eager_counter:app"
KEYS = 40
FIRST = range(0, 2_000)
SECOND = range(2_000, 8_000)


def key_of(seq: int) -> str:
    return f"k{seq % KEYS}"


async def committed_output(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """Every committed record of ``topic``, up to its last stable offsets: key -> values."""
    out: dict[str, list[int]] = defaultdict(list)
    for record in await committed_records(bootstrap, topic, PARTITIONS):
        out[record.key.decode()].append(int(record.value))
    return out


def describe(wrong: dict[str, list[int]], expected: Counter[str]) -> str:
    """For the first keys whose output is wrong: where it leaves 1..n, and what follows."""
    lines = [f"{len(wrong)} keys of {len(expected)} with wrong output"]
    for key, values in list(wrong.items())[:3]:
        at = next((i for i, v in enumerate(values) if v != i + 1), len(values))
        lines.append(
            f"{key}: {len(values)} values for {expected[key]} events; from index {at}: "
            f"{values[max(0, at - 3) : at + 20]}"
        )
    return "\n".join(lines)


def test_counts_exactly_through_a_sigkill(kafka_bootstrap: str, tmp_path: Path) -> None:
    app_id = f"it-eager-{int(time.time() * 1000) % 10**8}"
    events, counts_topic = f"{app_id}-events", f"{app_id}-counts"
    asyncio.run(create_topics(kafka_bootstrap, {events: PARTITIONS, counts_topic: PARTITIONS}))
    expected = Counter(key_of(seq) for seq in (*FIRST, *SECOND))
    worker = WorkerProcess(APP, kafka_bootstrap, tmp_path / "w", env={"EAGER_APP_ID": app_id})
    try:
        worker.start()
        worker.wait_for("/counts/", lambda view: isinstance(view, dict), timeout=180)
        asyncio.run(produce(kafka_bootstrap, events, FIRST, key_of))
        worker.wait_for("/counts/", lambda v: sum(v["counts"].values()) >= len(FIRST))
        # Killed while it processes the second part (whatever it has done by then, the
        # results below must be exact).
        with ProducedAroundAKill(
            kafka_bootstrap, events, SECOND, key_of, before_kill=len(SECOND) // 2
        ) as second:
            seen = worker.wait_for(
                "/counts/", lambda v: sum(v["counts"].values()) >= len(FIRST) + 500
            )
            worker.stop(signal.SIGKILL)
            second.killed()
        assert sum(seen["counts"].values()) < len(FIRST) + len(SECOND), "killed after the end"

        worker.start()
        view = worker.wait_for(
            "/counts/",
            lambda v: sum(v["counts"].values()) >= sum(expected.values()),
            timeout=240,
        )
        assert view["counts"] == dict(expected)
        assert view["handed_out_at_once"] > 0, view
        # A clean stop commits the last transaction; then the output is read to its end.
        assert worker.stop() == 0, worker.log_tail()
        output = asyncio.run(committed_output(kafka_bootstrap, counts_topic))
        wrong = {k: v for k, v in output.items() if v != list(range(1, expected[k] + 1))}
        assert not wrong, describe(wrong, expected)
        assert set(output) == set(expected)
    finally:
        if worker.alive():
            worker.kill()
