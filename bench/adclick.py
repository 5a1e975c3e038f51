"""Ad-click join: streamapp (3 workers) vs Spark Structured Streaming, same topics, same data.

    .venv/bin/python -m bench.adclick [--events 20000] [--latency-events 3000] [--rate 300]
        [--engines streamapp,spark] [--scale-out eager,cooperative] [--steady-s 20] [--keep]

One run, one local broker. Each engine in turn, on the same input topics (Spark
starts at the offsets where its phase begins) and with the same generated
traffic, so they never compete for the machine's two cores:

* latency: traffic paced at ``--rate`` records/s; for each attribution, the
  time from its later input record being produced (Kafka CreateTime) to the
  joined record being read from the engine's output topic by a live consumer;
* sustained throughput: ``--events`` records produced as fast as possible;
  input records / seconds from the first record produced to the last expected
  attribution read.

Then, for each rebalance protocol of ``--scale-out`` (each on topics and a group of its
own): three streamapp workers (``--rebalance-protocol`` given explicitly, static members as
streamapp's default) take traffic paced at ``--rate`` records/s; after ``--steady-s`` seconds a
fourth worker joins, and the traffic goes on until the group has settled again (the new worker
holds partitions and no follow-up rebalance is pending) and ``--tail-s`` seconds more. Each
attribution's latency (as above) falls in the steady-state window or the scale-out window by
when its later input record was produced; the p99 of each, and their ratio, are printed (the
issue's target: at most 2x).

Prints one table and the streamapp/spark ratios, then the scale-out table and, for each
protocol, its breakdown: the join partitions that moved to another worker against those that
stayed, and the scale-out second by second (docs/performance.md). The run's data dir
(the workers' data and logs, the broker's, Spark's checkpoints) is deleted at the end, unless
``--keep``: then it stays, and its worker logs are listed. Never part of the tests.
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

from bench.lib.latency import (
    Sample,
    Second,
    Side,
    in_window,
    moved_partitions,
    over,
    percentile,
    side,
    timeline,
)
from examples.adclick import kafka_io
from examples.adclick.cluster import Worker, active_partitions, stop_all, wait_until_assigned
from examples.adclick.events import TrafficConfig
from examples.adclick.generator import produce
from examples.adclick.topology import Topology
from streamapp.testing.stop_signals import run_until_stopped


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
) -> tuple[dict[str, int], dict[str, tuple[str, int, int]]]:
    """CreateTime of each impression (by auction) and click (by click id: auction, time,
    partition)."""
    impressions: dict[str, int] = {}
    clicks: dict[str, tuple[str, int, int]] = {}
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
                clicks.setdefault(obj["click_id"], (obj["auction_id"], r.timestamp_ms, r.partition))
    return impressions, clicks


async def _latencies(
    bootstrap: str,
    topology: Topology,
    since: dict[TopicPartition, int],
    probe: OutputProbe,
    seed: int,
) -> list[Sample]:
    """(when the later input record was produced, ms from it to the attribution read, the join
    partition), for each attribution of traffic ``seed`` the probe saw."""
    impressions, clicks = await _input_times(bootstrap, topology, since)
    out = []
    for click_id, seen_at in probe.seen.items():
        if not click_id.startswith(f"c{seed}-") or click_id not in clicks:
            continue
        auction_id, click_ts, partition = clicks[click_id]
        later_input_ms = max(click_ts, impressions.get(auction_id, click_ts))
        out.append(Sample(later_input_ms / 1000, seen_at * 1000 - later_input_ms, partition))
    return out


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
        latencies = [
            s.ms for s in await _latencies(bootstrap, topology, since, probe, latency_seed)
        ]
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
        Worker(f"bench-worker-{i + 1}", bootstrap, topology, data_dir / f"w{i + 1}")
        for i in range(3)
    ]
    if args.profile:
        # The first worker's process, profiled (bench/apps/adclick_profiled.py).
        workers[0].app = "bench.apps.adclick_profiled:app"
        workers[0].env["ADCLICK_BENCH_PROFILE"] = str(
            Path(args.profile) / "streamapp-worker-1.prof"
        )
    try:  # started inside: a stop between two starts still stops the first
        for worker in workers:
            worker.start()
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


#: Rebalance protocols ``--scale-out`` may name.
PROTOCOLS = ("eager", "cooperative")


@dataclass
class ScaleOutResult:
    protocol: str
    steady_p50_ms: float | None
    steady_p99_ms: float | None
    scale_out_p99_ms: float | None
    scale_out_seconds: float  # from the fourth worker's start to the group settled again
    steady_attributions: int
    scale_out_attributions: int
    #: The breakdown (see `breakdown_lines`): the join partitions whose owner changed, the
    #: scale-out window's samples of those and of the others, the p99 of the scale-out window
    #: stretched to the traffic's end (``--tail-s`` past the settle), and that stretched window
    #: second by second.
    moved: tuple[int, ...] = ()
    moved_side: Side | None = None
    stayed_side: Side | None = None
    with_tail_p99_ms: float | None = None
    seconds: tuple[Second, ...] = ()
    slow: tuple[Sample, ...] = ()  # the scale-out window's samples over twice the steady p99
    joined_at: float = 0.0

    @property
    def ratio(self) -> float | None:
        if self.scale_out_p99_ms is None or not self.steady_p99_ms:
            return None
        return self.scale_out_p99_ms / self.steady_p99_ms


def _protocol_worker(
    name: str, bootstrap: str, topology: Topology, data_dir: Path, protocol: str
) -> Worker:
    worker = Worker(name, bootstrap, topology, data_dir / name)
    # Explicit, whatever streamapp's defaults are: the figures keep their meaning.
    worker.env.update(
        STREAMAPP_REBALANCE_PROTOCOL=protocol,
        STREAMAPP_STATIC_MEMBERSHIP="true",
    )
    return worker


def _owners(workers: list[Worker], topic: str) -> dict[int, str]:
    """Which worker holds each partition of ``topic`` active, as the workers say now."""
    owners: dict[int, str] = {}
    for w in workers:
        for p in active_partitions([w.assignment()], topic):
            owners[p] = w.name
    return owners


def _settled(workers: list[Worker], topology: Topology, newcomer: Worker | None) -> bool:
    """Every worker in one generation and resumed in it, no follow-up pending, every partition
    of the join held, and the newcomer (if any) holding some."""
    views = [w.assignment() for w in workers]
    if not all(views):
        return False
    present = [v for v in views if v]
    if len({v["generation"] for v in present}) != 1:
        return False
    for v in present:
        if v["followup_pending"] or not v["history"]:
            return False
        if v["history"][-1]["generation"] != v["generation"]:
            return False
    held = active_partitions(views, topology.impressions)
    if held != set(range(topology.partitions)):
        return False
    return newcomer is None or bool(
        active_partitions([newcomer.assignment()], topology.impressions)
    )


async def measure_scale_out(
    protocol: str,
    bootstrap: str,
    topology: Topology,
    workers: list[Worker],
    newcomer: Worker,
    args: argparse.Namespace,
    seed: int,
) -> ScaleOutResult:
    probe = OutputProbe(bootstrap, topology.attributed)
    await probe.start()
    try:
        since = await kafka_io.end_offsets(bootstrap, [topology.impressions, topology.clicks])
        seconds = args.steady_s + args.scale_out_timeout + args.tail_s
        cfg = TrafficConfig(
            events=int(args.rate * seconds),
            seed=seed,
            rate=args.rate,
            window_ms=topology.window_ms,
            grace_ms=topology.grace_ms,
        )
        say(f"{protocol}: scale-out phase, up to {cfg.events} records at {cfg.rate:.0f}/s")
        traffic_started = time.time()
        traffic = asyncio.create_task(produce(bootstrap, cfg, topology, progress=None))
        await asyncio.sleep(args.steady_s)
        owners_before = await asyncio.to_thread(_owners, workers, topology.impressions)
        joined = time.time()
        say(f"{protocol}: a fourth worker joins")
        newcomer.start()
        group = [*workers, newcomer]
        deadline = time.monotonic() + args.scale_out_timeout
        while not await asyncio.to_thread(_settled, group, topology, newcomer):
            if not newcomer.alive():
                raise RuntimeError(f"{newcomer.name} exited:\n{newcomer.log_tail()}")
            if time.monotonic() > deadline or traffic.done():
                raise TimeoutError(
                    f"{protocol}: the group did not settle within {args.scale_out_timeout:.0f} s "
                    "of the fourth worker's start"
                )
            await asyncio.sleep(0.5)
        settled = time.time()
        say(f"{protocol}: settled {settled - joined:.1f} s after the join")
        owners_after = await asyncio.to_thread(_owners, group, topology.impressions)
        # The traffic goes on past the settle for --tail-s, then stops (the rest is not sent).
        await asyncio.sleep(args.tail_s)
        traffic.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await traffic
        # The records sent before the cancel are all joined once the probe has seen them settle.
        await _quiet(probe, seed)
        samples = await _latencies(bootstrap, topology, since, probe, seed)
        # The first seconds warm the workers' caches: steady state starts a quarter in.
        steady = in_window(samples, traffic_started + args.steady_s / 4, joined)
        during = in_window(samples, joined, settled)
        moved = moved_partitions(owners_before, owners_after)
        window = [s for s in samples if joined <= s.at < settled]
        steady_p99 = percentile(steady, 99)
        return ScaleOutResult(
            protocol=protocol,
            steady_p50_ms=percentile(steady, 50),
            steady_p99_ms=steady_p99,
            scale_out_p99_ms=percentile(during, 99),
            scale_out_seconds=settled - joined,
            steady_attributions=len(steady),
            scale_out_attributions=len(during),
            moved=tuple(sorted(moved)),
            moved_side=side(window, moved, moved=True),
            stayed_side=side(window, moved, moved=False),
            with_tail_p99_ms=percentile(in_window(samples, joined, settled + args.tail_s), 99),
            seconds=tuple(timeline(samples, joined, settled + args.tail_s, moved)),
            slow=tuple(over(samples, joined, settled, 2 * steady_p99)) if steady_p99 else (),
            joined_at=joined,
        )
    finally:
        await probe.stop()


async def _quiet(probe: OutputProbe, seed: int, quiet_s: float = 5.0) -> None:
    """Until the probe has seen no new attribution of ``seed`` for ``quiet_s`` seconds.

    The traffic was cut short (its length is a budget), so the exact count to wait for is not
    known; the join's window and grace are far shorter than ``quiet_s``."""
    count, since = probe.count(seed), time.monotonic()
    while time.monotonic() - since < quiet_s:
        await asyncio.sleep(0.25)
        now = probe.count(seed)
        if now != count:
            count, since = now, time.monotonic()


def run_scale_out(
    protocol: str, bootstrap: str, run: str, data_dir: Path, args: argparse.Namespace
) -> ScaleOutResult:
    topology = Topology(
        app_id=f"adclick-bench-{run}-{protocol}",
        prefix=f"bench-{run}-{protocol}-",
        window_ms=5_000,
    )
    asyncio.run(kafka_io.create_topics(bootstrap, topology.topic_partitions()))
    home = data_dir / protocol
    workers = [
        _protocol_worker(f"bench-worker-{i + 1}", bootstrap, topology, home, protocol)
        for i in range(3)
    ]
    newcomer = _protocol_worker("bench-worker-4", bootstrap, topology, home, protocol)
    try:  # started inside: a stop between two starts still stops the first
        for worker in workers:
            worker.start()
        wait_until_assigned(workers, topology, timeout=180)
        # The steady window starts once the start's own follow-up rebalances are over.
        deadline = time.monotonic() + args.scale_out_timeout
        while not _settled(workers, topology, None):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{protocol}: the three workers did not settle")
            time.sleep(0.5)
        return asyncio.run(
            measure_scale_out(protocol, bootstrap, topology, workers, newcomer, args, seed=301)
        )
    finally:
        stop_all([*workers, newcomer])  # the unstarted newcomer is skipped


def scale_out_table(results: list[ScaleOutResult], args: argparse.Namespace) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    lines = [
        f"ad-click join, scale-out 3 -> 4 workers at {args.rate:.0f} records/s: end-to-end "
        "latency by the later input's produce time, steady state (before the join) against the "
        "scale-out (the join to the group settled, follow-up included); target p99 ratio <= 2",
        f"{'protocol':<12} {'steady p50 ms':>13} {'steady p99 ms':>13} {'scale-out p99 ms':>16} "
        f"{'ratio':>6} {'scale-out s':>11} {'attributions':>15}",
    ]
    for r in results:
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        lines.append(
            f"{r.protocol:<12} {ms(r.steady_p50_ms):>13} {ms(r.steady_p99_ms):>13} "
            f"{ms(r.scale_out_p99_ms):>16} {ratio:>6} {r.scale_out_seconds:>11.1f} "
            f"{f'{r.steady_attributions}/{r.scale_out_attributions}':>15}"
        )
    return "\n".join(lines)


def breakdown_lines(r: ScaleOutResult, args: argparse.Namespace) -> list[str]:
    """Where a scale-out's latency tail comes from: the partitions that moved to another worker
    against those that stayed, and when (seconds after the fourth worker's start, by input
    time), up to the traffic's end."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    def kind(name: str, s: Side | None) -> str:
        if s is None:
            return f"{name} -"
        return f"{name} {s.count} attributions, p99 {ms(s.p99_ms)} ms, max {ms(s.max_ms)} ms"

    moved = set(r.moved)
    slow_moved = sum(1 for s in r.slow if s.partition in moved)
    lines = [
        f"{r.protocol}: join partitions moved {', '.join(map(str, r.moved)) or 'none'}; "
        f"scale-out window: {kind('moved', r.moved_side)}; {kind('stayed', r.stayed_side)}",
        f"{r.protocol}: over twice the steady p99: {slow_moved} of moved partitions, "
        f"{len(r.slow) - slow_moved} of stayed ones; scale-out p99 with the {args.tail_s:.0f} s "
        f"after the settle: {ms(r.with_tail_p99_ms)} ms",
        f"{r.protocol}: second after the join: stayed n/p99/max ms | moved n/p99/max ms",
    ]
    for sec in r.seconds:
        lines.append(
            f"  +{sec.offset_s:<3d} {sec.stayed.count:>4} {ms(sec.stayed.p99_ms):>5} "
            f"{ms(sec.stayed.max_ms):>5} | {sec.moved.count:>4} {ms(sec.moved.p99_ms):>5} "
            f"{ms(sec.moved.max_ms):>5}"
        )
    return lines


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
        "--profile", metavar="DIR", help="cProfile the first streamapp worker's process into DIR"
    )
    parser.add_argument(
        "--engines",
        default="streamapp,spark",
        help="comma-separated: streamapp, spark ('none' for the scale-out phase only)",
    )
    parser.add_argument(
        "--guarantee",
        choices=("at_least_once", "exactly_once"),
        default="at_least_once",
        help="the streamapp workers' processing_guarantee (default: %(default)s)",
    )
    parser.add_argument(
        "--scale-out",
        default=",".join(PROTOCOLS),
        help="rebalance protocols to run the scale-out phase under, comma-separated "
        "(default: %(default)s; 'none' for no scale-out phase)",
    )
    parser.add_argument(
        "--steady-s", type=float, default=20.0, help="scale-out phase: seconds before the join"
    )
    parser.add_argument(
        "--tail-s", type=float, default=5.0, help="scale-out phase: seconds of traffic after"
    )
    parser.add_argument(
        "--scale-out-timeout",
        type=float,
        default=120.0,
        help="scale-out phase: seconds the group may take to settle after the join",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the run's data dir at the end (it is deleted otherwise) and print where the "
        "workers' logs are in it",
    )
    args = parser.parse_args(argv)
    protocols = [] if args.scale_out == "none" else args.scale_out.split(",")
    if set(protocols) - set(PROTOCOLS):
        parser.error(f"--scale-out: {', '.join(PROTOCOLS)} or none")
    engine_names = [] if args.engines == "none" else args.engines.split(",")

    data_dir = Path(tempfile.mkdtemp(prefix="streamapp-bench-"))
    run = uuid.uuid4().hex[:8]
    topology = Topology(
        app_id=f"adclick-bench-{run}",
        prefix=f"bench-{run}-",
        window_ms=5_000,
        processing_guarantee=args.guarantee,
    )
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
        phases = [(name, engines[name]) for name in engine_names]
        results = []
        for name, run_engine in phases:
            say(f"== {name}")
            results.append(run_engine(bootstrap, topology, data_dir, args))
        scale_outs = []
        for protocol in protocols:
            say(f"== scale-out, {protocol}")
            scale_outs.append(run_scale_out(protocol, bootstrap, run, data_dir, args))
        if results:
            print(
                f"ad-click join, {args.events} records for throughput, {args.latency_events} at "
                f"{args.rate:.0f}/s for latency, 6 partitions, window {topology.window_ms} ms"
            )
            print(table(results))
        if scale_outs:
            print(scale_out_table(scale_outs, args))
            for r in scale_outs:
                print("\n".join(breakdown_lines(r, args)))
        return 0
    finally:
        if broker is not None:
            broker.stop()
        if args.keep:
            say(kept_logs(data_dir))
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


def kept_logs(data_dir: Path) -> str:
    """Where a kept run's worker logs are: each worker's log is ``<name>.log`` beside its data
    dir (`streamapp.testing.worker`), the throughput phase's in ``data_dir``, each scale-out
    phase's in its protocol's folder."""
    logs = sorted(data_dir.rglob("bench-worker-*.log"))
    listed = "".join(f"\n  {log}" for log in logs) if logs else " (no worker was started)"
    return f"kept {data_dir}; worker logs:{listed}"


if __name__ == "__main__":
    # SIGTERM stops it as Ctrl-C does: the finally blocks stop the broker and workers.
    raise SystemExit(run_until_stopped(main))
