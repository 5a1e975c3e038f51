"""Ad-click join: streamapp (3 workers) vs Spark Structured Streaming, same topics, same data.

    .venv/bin/python -m bench.adclick [--events 20000] [--latency-events 3000] [--rate 300]

One run, one local broker. Each engine in turn, on the same input topics (Spark
starts at the offsets where its phase begins) and with the same generated
traffic, so they never compete for the machine's two cores:

* latency: traffic paced at ``--rate`` records/s; for each attribution, the
  time from its later input record being produced (Kafka CreateTime) to the
  joined record being read from the engine's output topic by a live consumer;
* sustained throughput: ``--events`` records produced as fast as possible;
  input records / seconds from the first record produced to the last expected
  attribution read.

Prints one table and the streamapp/spark ratios. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from examples.adclick import kafka_io
from examples.adclick.cluster import Worker, stop_all, wait_until_assigned
from examples.adclick.events import TrafficConfig
from examples.adclick.generator import produce
from examples.adclick.topology import Topology


def say(line: str) -> None:
    print(f"bench: {line}", file=sys.stderr, flush=True)


@dataclass
class EngineResult:
    engine: str
    events_per_s: float
    p50_ms: float
    p99_ms: float
    attributions: int


class OutputProbe:
    """Reads an output topic live and notes when each click id is first seen."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.seen: dict[str, float] = {}  # click id -> wall time first read (s)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        ends = await kafka_io.end_offsets(self.bootstrap, [self.topic])
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            isolation_level="read_committed",
            fetch_max_wait_ms=50,
        )
        await consumer.start()
        consumer.assign(list(ends))
        for tp, offset in ends.items():
            consumer.seek(tp, offset)
        self._task = asyncio.create_task(self._run(consumer))

    async def _run(self, consumer: AIOKafkaConsumer) -> None:
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=100)
                now = time.time()
                for msgs in batch.values():
                    for m in msgs:
                        try:
                            click_id = json.loads(m.value)["click_id"]
                        except (ValueError, KeyError, TypeError):
                            continue
                        self.seen.setdefault(click_id, now)
        finally:
            await consumer.stop()

    def count(self, seed: int) -> int:
        prefix = f"c{seed}-"
        return sum(1 for c in self.seen if c.startswith(prefix))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def _input_times(
    bootstrap: str, topology: Topology, since: dict[TopicPartition, int]
) -> tuple[dict[str, int], dict[str, tuple[str, int]]]:
    """CreateTime of each impression (by auction) and click (by click id: auction, time)."""
    impressions: dict[str, int] = {}
    clicks: dict[str, tuple[str, int]] = {}
    for topic in (topology.impressions, topology.clicks):
        for r in await kafka_io.read_all(bootstrap, topic):
            if r.offset < since.get(TopicPartition(r.topic, r.partition), 0):
                continue
            try:
                obj = json.loads(r.value or b"")
            except ValueError:
                continue
            if topic == topology.impressions:
                impressions.setdefault(obj["auction_id"], r.timestamp_ms)
            else:
                clicks.setdefault(obj["click_id"], (obj["auction_id"], r.timestamp_ms))
    return impressions, clicks


async def _wait_for(probe: OutputProbe, seed: int, expected: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while probe.count(seed) < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{probe.topic}: {probe.count(seed)}/{expected} attributions after {timeout:.0f} s"
            )
        await asyncio.sleep(0.05)
    return max(t for c, t in probe.seen.items() if c.startswith(f"c{seed}-"))


async def measure(
    engine: str,
    bootstrap: str,
    topology: Topology,
    output_topic: str,
    args: argparse.Namespace,
    seeds: tuple[int, int],
) -> EngineResult:
    probe = OutputProbe(bootstrap, output_topic)
    await probe.start()
    try:
        latency_seed, throughput_seed = seeds
        since = await kafka_io.end_offsets(bootstrap, [topology.impressions, topology.clicks])
        cfg = TrafficConfig(
            events=args.latency_events,
            seed=latency_seed,
            rate=args.rate,
            window_ms=topology.window_ms,
            grace_ms=topology.grace_ms,
        )
        say(f"{engine}: latency phase, {cfg.events} records at {cfg.rate:.0f}/s")
        produced = await produce(bootstrap, cfg, topology, progress=None)
        await _wait_for(probe, latency_seed, produced.truth.in_window_clicks, args.timeout)
        impressions, clicks = await _input_times(bootstrap, topology, since)
        latencies = []
        for click_id, seen_at in probe.seen.items():
            if not click_id.startswith(f"c{latency_seed}-") or click_id not in clicks:
                continue
            auction_id, click_ts = clicks[click_id]
            later_input_ms = max(click_ts, impressions.get(auction_id, click_ts))
            latencies.append(seen_at * 1000 - later_input_ms)
        cuts = statistics.quantiles(latencies, n=100, method="inclusive")

        cfg = TrafficConfig(
            events=args.events,
            seed=throughput_seed,
            rate=args.rate,
            window_ms=topology.window_ms,
            grace_ms=topology.grace_ms,
        )
        say(f"{engine}: throughput phase, {cfg.events} records as fast as they can be produced")
        started = time.time()
        produced = await produce(bootstrap, cfg, topology, progress=None, paced=False)
        say(f"{engine}: produced in {produced.seconds:.1f} s; waiting for the join")
        done = await _wait_for(
            probe, throughput_seed, produced.truth.in_window_clicks, args.timeout
        )
        return EngineResult(
            engine=engine,
            events_per_s=args.events / (done - started),
            p50_ms=cuts[49],
            p99_ms=cuts[98],
            attributions=len(latencies) + produced.truth.in_window_clicks,
        )
    finally:
        await probe.stop()


def run_streamapp(
    bootstrap: str, topology: Topology, data_dir: Path, args: argparse.Namespace
) -> EngineResult:
    workers = [
        Worker(f"bench-worker-{i + 1}", bootstrap, topology, data_dir / f"w{i + 1}").start()
        for i in range(3)
    ]
    try:
        wait_until_assigned(workers, topology, timeout=180)
        return asyncio.run(
            measure("streamapp", bootstrap, topology, topology.attributed, args, (101, 102))
        )
    finally:
        stop_all(workers)


def run_spark(
    bootstrap: str, topology: Topology, data_dir: Path, args: argparse.Namespace
) -> EngineResult:
    from examples.adclick.spark.session import spark_session
    from examples.adclick.spark.streaming_join import start_join

    output = f"{topology.prefix}spark-attributed"
    asyncio.run(kafka_io.create_topics(bootstrap, {output: topology.partitions}))
    ends = asyncio.run(kafka_io.end_offsets(bootstrap, [topology.impressions, topology.clicks]))
    starting = {
        "impressions": {
            tp.partition: o for tp, o in ends.items() if tp.topic == topology.impressions
        },
        "clicks": {tp.partition: o for tp, o in ends.items() if tp.topic == topology.clicks},
    }
    spark = spark_session("adclick-bench", driver_memory="2g")
    query = start_join(
        spark,
        bootstrap,
        {"impressions": topology.impressions, "clicks": topology.clicks},
        output,
        data_dir / "spark-checkpoint",
        topology.window_ms,
        topology.grace_ms,
        starting,
    )
    try:
        # The first micro-batch plans the query and warms the JVM; measure after it.
        deadline = time.monotonic() + 120
        while query.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.5)
        return asyncio.run(measure("spark", bootstrap, topology, output, args, (201, 202)))
    finally:
        query.stop()
        spark.stop()


def table(results: list[EngineResult]) -> str:
    lines = [
        f"{'engine':<12} {'events/s':>10} {'p50 ms':>9} {'p99 ms':>9}",
        *(
            f"{r.engine:<12} {r.events_per_s:>10.0f} {r.p50_ms:>9.0f} {r.p99_ms:>9.0f}"
            for r in results
        ),
    ]
    if len(results) != 2:
        return "\n".join(lines)
    s, p = results
    lines.append(
        f"ratios streamapp/spark: throughput {s.events_per_s / p.events_per_s:.2f}x, "
        f"p50 latency {s.p50_ms / p.p50_ms:.2f}x, p99 latency {s.p99_ms / p.p99_ms:.2f}x"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.adclick")
    parser.add_argument("--events", type=int, default=20_000, help="throughput phase records")
    parser.add_argument("--latency-events", type=int, default=3_000)
    parser.add_argument("--rate", type=float, default=300.0, help="latency phase records/s")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--engines", default="streamapp,spark", help="comma-separated: streamapp, spark"
    )
    args = parser.parse_args(argv)

    data_dir = Path(tempfile.mkdtemp(prefix="streamapp-bench-"))
    run = uuid.uuid4().hex[:8]
    topology = Topology(app_id=f"adclick-bench-{run}", prefix=f"bench-{run}-", window_ms=5_000)
    broker = None
    try:
        bootstrap = args.bootstrap
        if bootstrap is None:
            from streamapp.kafka import LocalKafka
            from streamapp.kafka.probe import free_port

            broker = LocalKafka(port=free_port(), data_dir=data_dir / "kafka")
            bootstrap = broker.start()
        asyncio.run(kafka_io.create_topics(bootstrap, topology.topic_partitions()))
        engines: dict[str, Callable[..., EngineResult]] = {
            "streamapp": run_streamapp,
            "spark": run_spark,
        }
        phases = [(name, engines[name]) for name in args.engines.split(",")]
        results = []
        for name, run_engine in phases:
            say(f"== {name}")
            results.append(run_engine(bootstrap, topology, data_dir, args))
        print(
            f"ad-click join, {args.events} records for throughput, {args.latency_events} at "
            f"{args.rate:.0f}/s for latency, 6 partitions, window {topology.window_ms} ms"
        )
        print(table(results))
        return 0
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
