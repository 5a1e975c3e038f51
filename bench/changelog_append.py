"""What a batch's changelog records cost the worker's process on aiokafka's producer: one
``send`` per record, against `streamapp.runtime.producer.batch_append` (docs/performance.md).

    .venv/bin/python -m bench.changelog_append [--batches 2000] [--rounds 5]

Starts a local broker (one topic of six partitions) and one started aiokafka producer (acks
all, no linger, Faust's batch size), streamapp's ``WorkerProducer`` as in a
worker. Each side hands ``--batches`` agent batches of ``n`` records (the throughput
benchmark's key and value sizes, batch ``i`` to partition ``i % 6``) to the producer, as
`batch_changelog` does at a batch's end, then waits for every batch's last record to be
delivered. Per record, the process's CPU time over that (the event loop's appends, aiokafka's
sender building the requests and resolving what was delivered; the broker is another
process), best of ``--rounds`` alternating rounds: on a busy machine the best is the least
disturbed. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streamapp.kafka import LocalKafka
from streamapp.kafka.probe import free_port
from streamapp.runtime.producer import batch_append
from streamapp.runtime.producer.client import WorkerProducer

TOPIC = "bench-changelog-append"
PARTITIONS = 6

Records = list[tuple[Any, str, int, bytes, bytes | None]]


async def per_record(producer: AIOKafkaProducer, records: Records) -> asyncio.Future[Any]:
    """The path before step 8: aiokafka's ``send`` per record, the last future kept."""
    fut: asyncio.Future[Any] | None = None
    for _, topic, partition, key, value in records:
        fut = await producer.send(topic, value, key=key, partition=partition)
    assert fut is not None
    return fut


async def appended(producer: AIOKafkaProducer, records: Records) -> asyncio.Future[Any]:
    ((fut, _),) = (await batch_append.send(producer, records)).values()
    return fut


async def cpu_per_record(
    producer: AIOKafkaProducer, side: Any, batches: list[Records], records: int
) -> float:
    start = time.process_time()
    last = [await side(producer, batch) for batch in batches]
    await asyncio.gather(*last)
    return (time.process_time() - start) / records * 1e6


async def run(bootstrap: str, args: argparse.Namespace) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    finally:
        await admin.close()
    producer = WorkerProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await producer.start()
    try:
        for partition in range(PARTITIONS):  # the new topic's leaders known, before timing
            await producer.send_and_wait(TOPIC, b"first", key=b"k", partition=partition)
        sides = {"send per record": per_record, "batch_append": appended}
        print(f"CPU µs per record, best of {args.rounds} alternating rounds")
        print(f"{'records per batch':<18} {'send per record':>16} {'appended':>10} {'ratio':>7}")
        for n in args.sizes:
            batches: list[Records] = [
                [
                    ("table", TOPIC, i % PARTITIONS, f'"k{i * n + j:04d}"'.encode(), b"1234")
                    for j in range(n)
                ]
                for i in range(args.batches)
            ]
            best = {name: float("inf") for name in sides}
            await cpu_per_record(producer, appended, batches[:50], 50 * n)  # warm up
            for _ in range(args.rounds):
                for name, side in sides.items():
                    us = await cpu_per_record(producer, side, batches, args.batches * n)
                    best[name] = min(best[name], us)
            before, after = best.values()
            print(f"{n:<18} {before:>16.2f} {after:>10.2f} {before / after:>6.2f}x")
    finally:
        await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 100])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-changelog-append-") as root:
        broker = LocalKafka(port=free_port(), data_dir=Path(root) / "kafka")
        broker.start()
        try:
            asyncio.run(run(broker.bootstrap, args))
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
