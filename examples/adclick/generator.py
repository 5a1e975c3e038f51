"""Produce the demo's synthetic impressions and clicks to Kafka, paced, with progress.

    python -m examples.adclick.generator --bootstrap 127.0.0.1:9092 --events 20000 --rate 500

Records are keyed by auction id (UTF-8) and partitioned by Kafka's default
partitioner, so an auction's impression and clicks land on the same partition
number of the two co-partitioned topics.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from aiokafka import AIOKafkaProducer

from examples.adclick.events import IMPRESSIONS, TrafficConfig, Truth, plan_traffic
from examples.adclick.topology import Topology

ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class ProduceResult:
    records: int
    seconds: float
    truth: Truth


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def produce(
    bootstrap: str,
    cfg: TrafficConfig,
    topology: Topology,
    *,
    progress: ProgressFn | None = _stderr,
    progress_every_s: float = 5.0,
    paced: bool = True,
) -> ProduceResult:
    """Produce the planned records, at ``cfg.rate`` per second when ``paced``."""
    if cfg.base_time_ms == 0:
        # Event times near the wall clock make end-to-end latency meaningful.
        cfg = replace(cfg, base_time_ms=int(time.time() * 1000))
    records, truth = plan_traffic(cfg)
    topics = {IMPRESSIONS: topology.impressions, "clicks": topology.clicks}
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5
    )
    await producer.start()
    start = time.monotonic()
    next_report = start + progress_every_s
    try:
        pending: list[asyncio.Future[object]] = []
        for i, record in enumerate(records, 1):
            if paced:
                delay = start + record.arrival_ms / 1000.0 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            pending.append(
                await producer.send(topics[record.topic], key=record.key, value=record.value)
            )
            if len(pending) >= 1000:
                await asyncio.gather(*pending)
                pending.clear()
            now = time.monotonic()
            if progress is not None and now >= next_report:
                elapsed = now - start
                progress(
                    f"generator: {i}/{len(records)} records in {elapsed:.0f} s "
                    f"({i / elapsed:.0f}/s)"
                )
                next_report = now + progress_every_s
        await asyncio.gather(*pending)
        await producer.flush()
    finally:
        await producer.stop()
    seconds = time.monotonic() - start
    if progress is not None:
        progress(f"generator: produced {len(records)} records in {seconds:.1f} s")
    return ProduceResult(len(records), seconds, truth)


def traffic_config(args: argparse.Namespace, topology: Topology) -> TrafficConfig:
    """The traffic the command-line options ask for, on the app's join window and grace."""
    return TrafficConfig(
        events=args.events,
        seed=args.seed,
        rate=args.rate,
        late_fraction=args.late_fraction,
        window_ms=topology.window_ms,
        grace_ms=topology.grace_ms,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m examples.adclick.generator",
        description="Produce deterministic synthetic ad impressions and clicks.",
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--events", type=int, default=20_000, help="records to produce")
    parser.add_argument("--rate", type=float, default=500.0, help="records per second")
    parser.add_argument("--late-fraction", type=float, default=0.05, help="of clicks")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--prefix", default="", help="topic name prefix")
    parser.add_argument("--truth", type=Path, help="write the built-in truth here (JSON)")
    parser.add_argument("--unpaced", action="store_true", help="produce as fast as possible")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    topology = Topology.from_env()
    if args.prefix:
        topology = replace(topology, prefix=args.prefix)
    cfg = traffic_config(args, topology)
    result = asyncio.run(produce(args.bootstrap, cfg, topology, paced=not args.unpaced))
    if args.truth:
        args.truth.write_text(json.dumps(result.truth.as_dict(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
