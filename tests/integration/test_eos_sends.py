"""A plain ``Topic.send`` from an agent under exactly_once, through a SIGKILL, on a real broker.

Two `streamapp worker`s of apps/eos_sends.py forward every event to an output topic with
``await out.send(...)``. One is killed with SIGKILL while both process, and started again on
its data dir. Read with read_committed, the output then holds every input exactly once: the
sends of the records whose offsets the crash left uncommitted were in the aborted transaction,
not out on their own (Faust sends them outside any transaction). Every wait is on content.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

from streamapp.testing.kafka_io import (
    ProducedAroundAKill,
    committed_records,
    create_topics,
    produce,
)
from streamapp.testing.worker import WorkerProcess

from .apps.eos_sends import PARTITIONS
from .workers import wait_for_workers

APP = "tests.integration.apps.eos_sends:app"
KEYS = 40
FIRST = range(0, 2_000)
SECOND = range(2_000, 8_000)


def key_of(seq: int) -> str:
    return f"k{seq % KEYS}"


async def committed_values(bootstrap: str, topic: str) -> Counter[int]:
    """How many times each value is in ``topic``'s committed records, up to its LSO."""
    return Counter(int(r.value) for r in await committed_records(bootstrap, topic, PARTITIONS))


def test_plain_sends_are_exactly_once_through_a_sigkill(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    app_id = f"it-eos-sends-{int(time.time() * 1000) % 10**8}"
    events, out = f"{app_id}-events", f"{app_id}-out"
    asyncio.run(create_topics(kafka_bootstrap, {events: PARTITIONS, out: PARTITIONS}))
    env = {"EOS_SENDS_APP_ID": app_id}
    workers = {
        name: WorkerProcess(APP, kafka_bootstrap, tmp_path / name, env=env) for name in ("a", "b")
    }
    total = len(FIRST) + len(SECOND)

    def committed() -> Counter[int]:
        return asyncio.run(committed_values(kafka_bootstrap, out))

    def owns_events(worker: WorkerProcess) -> bool:
        view = worker.assignment()
        return view is not None and bool(view["active"].get(events))

    try:
        for worker in workers.values():
            worker.start()
        wait_for_workers(
            workers,
            "both workers own events partitions",
            lambda: all(owns_events(w) for w in workers.values()),
            timeout=180,
        )
        asyncio.run(produce(kafka_bootstrap, events, FIRST, key_of))
        wait_for_workers(
            workers, "the first part forwarded", lambda: len(committed()) >= len(FIRST), timeout=180
        )
        # Killed while both process the second part.
        with ProducedAroundAKill(
            kafka_bootstrap, events, SECOND, key_of, before_kill=len(SECOND) // 2
        ) as second:
            wait_for_workers(
                workers,
                "some of the second part",
                lambda: len(committed()) >= len(FIRST) + 500,
                timeout=180,
            )
            workers["b"].stop(signal.SIGKILL)
            second.killed()
        assert len(committed()) < total, "killed after the end"

        workers["b"].start()
        wait_for_workers(
            workers, "every event forwarded", lambda: len(committed()) >= total, timeout=300
        )
        # Clean stops commit the last transactions; then the output is read to its end.
        for name, worker in workers.items():
            assert worker.stop() == 0, f"{name}:\n{worker.log_tail()}"
        seen = committed()
        repeated = {v: n for v, n in seen.items() if n != 1}
        assert set(seen) == set(range(total))
        assert not repeated, (
            f"{len(repeated)} of {total} inputs forwarded more than once, "
            f"{sum(repeated.values()) - len(repeated)} extra records; e.g. "
            f"{sorted(repeated.items())[:10]}"
        )
    finally:
        for worker in workers.values():
            if worker.alive():
                worker.kill()
