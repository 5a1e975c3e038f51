"""`streamapp demo`: the ad-click join end to end, with a worker crash in the middle.

Starts a local Kafka broker, creates the topics, runs three workers (under
exactly_once, or ``--at-least-once``), produces synthetic traffic, kills one
worker with SIGKILL part-way and restarts it, waits until every record is
processed, reconciles the output against Spark's batch join of the raw topics,
and ends with the line

    demo: N events, J joined, M missing, D duplicated, R records replayed
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from examples.adclick import kafka_io
from examples.adclick.cluster import Worker, stop_all, wait_until_assigned
from examples.adclick.events import TrafficConfig, Truth
from examples.adclick.generator import ProduceResult, produce, traffic_config
from examples.adclick.model import DecodeError, decode_attribution
from examples.adclick.topology import JOIN_NAME, Topology
from streamapp.bad_records import HEADER_PREFIX
from streamapp.joins.core import held_entries
from streamapp.kafka import LocalKafka, broker_status
from streamapp.testing.stop_signals import run_until_stopped, shielded, stopped_by


def say(line: str) -> None:
    print(f"demo: {line}", file=sys.stderr, flush=True)


@dataclass
class DemoResult:
    processing_guarantee: str
    events: int
    truth: Truth
    reconciliation: Any  # examples.adclick.spark.reference.Reconciliation
    replayed: int
    replayed_source: str
    counters: dict[str, int]
    restarts: int  # of the killed worker
    pending_at_end: int  # clicks still waiting for their impression when the run stopped
    dead_letter_sources: set[tuple[str, str, str]]  # (topic, partition, offset) refused
    # campaign -> clicks (if any), as the per-campaign aggregate (a batch agent) counted them
    campaign_clicks: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    report: dict[str, Path] = field(default_factory=dict)

    def summary_line(self) -> str:
        r = self.reconciliation
        return (
            f"demo: {self.events} events, {r.joined} joined, {r.missing} missing, "
            f"{r.duplicated} duplicated, {self.replayed} records replayed"
        )


class _ShowDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default in its help, except "none" and "off", which say nothing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="streamapp demo",
        description="The ad-click join end to end on a local broker, with a worker crash: "
        "produce impressions and clicks, join them in --workers workers, kill one mid-run and "
        "restart it, then reconcile the output on Spark against a batch join.",
        # Every option's default in its help: the demo's knobs are what a reader tries first.
        formatter_class=_ShowDefaults,
    )
    p.add_argument("--events", type=int, default=30_000, help="records to produce")
    p.add_argument("--rate", type=float, default=500.0, help="records per second")
    p.add_argument(
        "--late-fraction", type=float, default=0.05, help="share of clicks later than the window"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=7,
        help="seed of the synthetic traffic: one seed, the same records (ids, times, keys)",
    )
    p.add_argument("--workers", type=int, default=3, help="worker processes of the ad-click app")
    p.add_argument("--partitions", type=int, default=6, help="of impressions and clicks")
    p.add_argument(
        "--window-ms",
        type=int,
        default=10_000,
        help="join window: a click joins its impression when at most this many milliseconds "
        "later (event time)",
    )
    p.add_argument(
        "--kill-at", type=float, default=0.4, help="kill a worker after this share of the events"
    )
    p.add_argument(
        "--down-seconds", type=float, default=3.0, help="how long the killed worker stays down"
    )
    guarantee = p.add_mutually_exclusive_group()
    guarantee.add_argument(
        "--exactly-once",
        dest="guarantee",
        action="store_const",
        const="exactly_once",
        help='processing_guarantee="exactly_once" (the default): each record counts once, in '
        "the output and in the tables, through the crash",
    )
    guarantee.add_argument(
        "--at-least-once",
        dest="guarantee",
        action="store_const",
        const="at_least_once",
        help='processing_guarantee="at_least_once": records processed again after the crash '
        "repeat their output and their counts",
    )
    p.add_argument("--bootstrap", help="use this broker instead of starting one")
    p.add_argument("--port", type=int, default=0, help="port of the broker started (0: free)")
    p.add_argument(
        "--kafka-version",
        metavar="VERSION",
        help="Apache Kafka release of the broker started, e.g. 3.9.1 "
        "(default: $STREAMAPP_KAFKA_VERSION, else streamapp's default, 4.4.0)",
    )
    p.add_argument(
        "--data-dir", type=Path, help="broker and worker state (a temp dir when not given)"
    )
    p.add_argument(
        "--report-dir", type=Path, default=Path("reports/adclick"), help="where the report goes"
    )
    p.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for the output to complete"
    )
    return p


async def _kill_and_restart(worker: Worker, at_s: float, down_s: float) -> float:
    await asyncio.sleep(at_s)
    say(f"killing {worker.name} (pid {worker.process.pid if worker.process else '?'}) with SIGKILL")
    worker.kill()
    killed_at = time.monotonic()
    await asyncio.sleep(down_s)
    say(f"restarting {worker.name} on its data dir")
    worker.start()
    return killed_at


async def _produce_with_crash(
    bootstrap: str, cfg: TrafficConfig, topology: Topology, victim: Worker, args: Any
) -> ProduceResult:
    produce_s = cfg.events / cfg.rate
    crash = asyncio.create_task(
        _kill_and_restart(victim, args.kill_at * produce_s, args.down_seconds)
    )
    result = await produce(bootstrap, cfg, topology, progress=say, progress_every_s=10.0)
    await crash
    return result


async def _wait_complete(
    bootstrap: str, topology: Topology, expected: int, workers: list[Worker], timeout: float
) -> float:
    """Until the group has committed every input record and the output holds every
    expected attribution (or the time is up); returns the seconds waited."""
    start = time.monotonic()
    last_report = 0.0
    while True:
        for w in workers:
            if not w.alive():
                raise RuntimeError(f"{w.name} died:\n{w.log_tail()}")
        lag = await kafka_io.group_lag(
            bootstrap, topology.app_id, [topology.impressions, topology.clicks]
        )
        out = await kafka_io.read_all(bootstrap, topology.attributed, read_committed=True)
        distinct = len(_click_ids(out))
        waited = time.monotonic() - start
        if lag == 0 and distinct >= expected:
            return waited
        if waited - last_report >= 10:
            say(f"waiting: {lag} input records not committed, {distinct}/{expected} attributed")
            last_report = waited
        if waited > timeout:
            say(f"gave up waiting after {waited:.0f} s ({lag} uncommitted, {distinct} attributed)")
            return waited
        await asyncio.sleep(2.0)


async def _wait_aggregated(
    bootstrap: str, topology: Topology, workers: list[Worker], timeout: float
) -> None:
    """Until the group has committed every record of the per-campaign topics (or the time is
    up). Called once the join committed its input: its output to those topics is complete."""
    start = time.monotonic()
    topics = [topology.campaign_impressions, topology.campaign_clicks]
    while True:
        for w in workers:
            if not w.alive():
                raise RuntimeError(f"{w.name} died:\n{w.log_tail()}")
        # Not group_lag: the join writes these topics in transactions under exactly_once.
        left = await kafka_io.uncommitted_records(bootstrap, topology.app_id, topics)
        if left == 0:
            return
        if time.monotonic() - start > timeout:
            say(f"gave up waiting for the per-campaign aggregate ({left} records not committed)")
            return
        await asyncio.sleep(2.0)


async def _campaign_clicks(bootstrap: str, topology: Topology) -> dict[str, int]:
    """Clicks per campaign from the campaign-stats table's changelog (campaigns with clicks:
    one with impressions only is not in the generator's count either)."""
    latest = await kafka_io.latest_by_key(bootstrap, topology.changelog("campaign-stats"))
    clicks = {}
    for key, value in latest.items():
        n = int(json.loads(value).get("clicks", 0)) if value is not None else 0
        if n:
            clicks[str(json.loads(key))] = n
    return clicks


def _click_ids(records: list[kafka_io.TopicRecord]) -> set[str]:
    ids = set()
    for r in records:
        try:
            ids.add(decode_attribution(r.value).click_id)
        except DecodeError:
            continue  # counted by the reconciliation, not here
    return ids


async def _counters(bootstrap: str, topology: Topology) -> dict[str, int]:
    """Outcome counts summed over partitions, from the counters table's changelog."""
    totals: dict[str, int] = {}
    latest = await kafka_io.latest_by_key(bootstrap, topology.changelog("counters"))
    for key, value in latest.items():
        if value is None:
            continue
        name = json.loads(key).rsplit("/p", 1)[0]
        totals[name] = totals.get(name, 0) + int(json.loads(value))
    return totals


async def _pending_at_end(bootstrap: str, topology: Topology) -> int:
    """Clicks still held for an impression that never came, from the join's clicks changelog.

    The join emits a click unmatched when stream time passes its expiry, and stream time stops
    with the input: the clicks of the last window are still pending when the demo ends.
    """
    clicks_table = topology.changelog(f"{JOIN_NAME}-left")
    latest = await kafka_io.latest_by_key(bootstrap, clicks_table)
    held = 0
    for key, value in latest.items():
        decoded = None if value is None else json.loads(value)
        held += sum(not e.matched for e in held_entries(json.loads(key), decoded))
    return held


async def _dead_letter_sources(bootstrap: str, topology: Topology) -> set[tuple[str, str, str]]:
    sources = set()
    for r in await kafka_io.read_all(bootstrap, topology.dead_letters, read_committed=True):
        h = {k.removeprefix(HEADER_PREFIX): v.decode() for k, v in r.headers}
        sources.add((h["topic"], h["partition"], h["offset"]))
    return sources


def _replayed(workers: list[Worker]) -> tuple[int, str]:
    """Changelog records the workers replayed, as their recovery meters count them."""
    views = [w.assignment() for w in workers]
    known = [v for v in views if v and "recovery" in v]
    total = sum(int(v["recovery"].get("records_replayed_total", 0)) for v in known)
    rebalances = sum(int(v.get("rebalances", 0)) for v in known)
    return total, (
        f"/streamapp/assignment of {len(known)}/{len(workers)} workers "
        f"({rebalances} rebalances seen by their current processes)"
    )


def processing_guarantee(args: argparse.Namespace) -> str:
    """The guarantee the demo's workers run under: exactly_once unless ``--at-least-once``."""
    return str(args.guarantee or "exactly_once")


def spark_log_path(args: argparse.Namespace) -> Path:
    """Where Spark's own output goes (examples.adclick.spark.reconcile)."""
    return Path(args.report_dir) / "spark.log"


def run_demo(args: argparse.Namespace) -> DemoResult:
    started = time.monotonic()
    seconds: dict[str, float] = {}
    run_id = uuid.uuid4().hex[:8]
    topology = Topology(
        app_id=f"adclick-{run_id}",
        prefix=f"demo-{run_id}-",
        partitions=args.partitions,
        window_ms=args.window_ms,
        processing_guarantee=processing_guarantee(args),
    )
    own_dir = args.data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="streamapp-demo-")) if own_dir else args.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    broker: LocalKafka | None = None
    workers: list[Worker] = []
    succeeded = False
    try:
        bootstrap = args.bootstrap
        if bootstrap is None:
            from streamapp.kafka.probe import free_port

            broker = LocalKafka(
                port=args.port or free_port(),
                data_dir=data_dir / "kafka",
                kafka_version=args.kafka_version,
            )
            say(f"starting the local Kafka {broker.kafka_version} broker")
            bootstrap = broker.start()
        say(
            f"broker {bootstrap}, run {run_id}, {topology.processing_guarantee}, data in {data_dir}"
        )
        asyncio.run(kafka_io.create_topics(bootstrap, topology.topic_partitions()))
        seconds["setup"] = time.monotonic() - started

        t = time.monotonic()
        for i in range(args.workers):
            # Listed before it starts: a stop while the next one starts still stops this one.
            workers.append(
                Worker(f"worker-{i + 1}", bootstrap, topology, data_dir / f"worker-{i + 1}")
            )
            workers[-1].start()
        say(f"started {len(workers)} workers; waiting until they own all partitions")
        wait_until_assigned(workers, topology, timeout=180)
        seconds["workers_ready"] = time.monotonic() - t

        t = time.monotonic()
        cfg = traffic_config(args, topology)
        victim = workers[len(workers) // 2]
        produced = asyncio.run(_produce_with_crash(bootstrap, cfg, topology, victim, args))
        seconds["produce"] = time.monotonic() - t

        t = time.monotonic()
        expected = produced.truth.in_window_clicks
        asyncio.run(_wait_complete(bootstrap, topology, expected, workers, args.timeout))
        asyncio.run(_wait_aggregated(bootstrap, topology, workers, args.timeout))
        seconds["drain"] = time.monotonic() - t
        replayed, source = _replayed(workers)
        counters = asyncio.run(_counters(bootstrap, topology))
        pending_at_end = asyncio.run(_pending_at_end(bootstrap, topology))
        dead_letters = asyncio.run(_dead_letter_sources(bootstrap, topology))
        stop_all(workers)
        # After the clean stop: under at_least_once a table's changelog records are sent after
        # the offsets commit, and a stopping worker flushes them.
        campaign_clicks = asyncio.run(_campaign_clicks(bootstrap, topology))
        # Spark's own output (Ivy's dependency resolution, its log) goes to a file.
        say(f"workers stopped; reconciling with Spark (its output in {spark_log_path(args)})")

        t = time.monotonic()
        from examples.adclick.spark.reconcile import run_reconciliation

        reconciliation, report = run_reconciliation(
            bootstrap,
            topology,
            args.report_dir,
            extra={"run": run_id, "processing_guarantee": topology.processing_guarantee},
        )
        seconds["spark"] = time.monotonic() - t
        seconds["total"] = time.monotonic() - started
        succeeded = True
        return DemoResult(
            processing_guarantee=topology.processing_guarantee,
            events=produced.records,
            truth=produced.truth,
            reconciliation=reconciliation,
            replayed=replayed,
            replayed_source=source,
            counters=counters,
            restarts=victim.starts - 1,
            pending_at_end=pending_at_end,
            dead_letter_sources=dead_letters,
            campaign_clicks=campaign_clicks,
            seconds={k: round(v, 1) for k, v in seconds.items()},
            report=report,
        )
    finally:
        why = sys.exc_info()[1]
        with shielded():  # a second Ctrl-C or SIGTERM must not leave children behind
            stopped = _stop_children(workers, broker)
            removed = own_dir and succeeded
            if removed:
                shutil.rmtree(data_dir, ignore_errors=True)
            where = (
                f"its data dir {data_dir} removed" if removed else f"logs and data in {data_dir}"
            )
            stop = stopped_by(why)
            cause = f" on {stop.name}" if stop else " after an error" if why else ""
            say(f"stopped{cause}: {stopped}; {where}")


def _stop_children(workers: list[Worker], broker: LocalKafka | None) -> str:
    """Stops every worker and the broker this run started; says which, by pid."""
    broker_state = broker_status(broker.port) if broker is not None else None
    pids = [str(w.process.pid) for w in workers if w.process is not None]
    try:
        stop_all(workers)
    finally:
        if broker is not None:
            broker.stop()
    stopped = [f"{len(pids)} workers (pids {', '.join(pids)})" if pids else "no workers"]
    if broker is not None:
        pid = f"pid {broker_state.pid}" if broker_state else "not started"
        stopped.append(f"the Kafka {broker.kafka_version} broker ({pid})")
    return " and ".join(stopped)


def print_summary(result: DemoResult) -> None:
    r, truth, c = result.reconciliation, result.truth, result.counters
    print(f"impressions {r.impressions}, clicks {r.clicks}, undecodable {r.undecodable}")
    print(
        f"generator truth: {truth.in_window_clicks} clicks in window, {truth.late_clicks} late, "
        f"{truth.orphan_clicks} without impression, {truth.early_arrivals} before their impression"
    )
    print(
        "streamapp counted: "
        f"{c.get('late', 0)} late, {c.get('unmatched', 0)} unmatched "
        f"(+{result.pending_at_end} still pending at the end), "
        f"{c.get('dead_letter', 0)} dead letters ({len(result.dead_letter_sources)} distinct "
        f"records in the dead-letter topic), {c.get('duplicate_click', 0)} duplicate clicks"
    )
    counted = result.campaign_clicks
    expected = truth.per_campaign_clicks
    off = [c for c in expected.keys() | counted.keys() if counted.get(c, 0) != expected.get(c, 0)]
    print(
        f"campaign aggregate: {sum(counted.values())} clicks over {len(counted)} campaigns "
        f"(generator: {sum(expected.values())}), "
        f"{len(off)} campaigns off the generator's count"
    )
    print(
        f"spark reference: {r.expected} attributions; output {r.output_records} records, "
        f"{r.mismatched} mismatched, {r.unexpected} unexpected"
    )
    if result.processing_guarantee == "at_least_once":
        print(
            f"at_least_once: the {r.duplicated} duplicated attributions (and the campaigns "
            "over the generator's count) are records the killed worker had processed but not "
            "committed, processed again after its restart (how many depends on where the kill "
            "lands); exactly_once, the default, repeats none"
        )
    print(f"records replayed from {result.replayed_source}")
    print("seconds: " + ", ".join(f"{k} {v}" for k, v in result.seconds.items()))
    print(f"report: {result.report.get('markdown')} (chart {result.report.get('chart')})")
    print(f"spark log: {result.report.get('spark_log')}")
    print(result.summary_line())


def _still_stopping(signum: int) -> None:
    say(f"{signal.Signals(signum).name}: already stopping the workers and the broker")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM and SIGHUP stop the run as Ctrl-C does: run_demo's clean-up stops what it started
    # and says so; the exit status is then 128 + the signal's number.
    return run_until_stopped(lambda: _run(args), on_repeat=_still_stopping)


def _run(args: argparse.Namespace) -> int:
    try:
        result = run_demo(args)
    except (RuntimeError, TimeoutError, OSError) as exc:
        print(f"demo: failed: {exc}", file=sys.stderr)
        return 1
    print_summary(result)
    r = result.reconciliation
    return 0 if r.missing == 0 and r.mismatched == 0 and r.unexpected == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
