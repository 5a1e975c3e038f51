"""Rebalance cost, stock Faust's assignor against streamapp's, on the same app, data and steps.

Each run starts its own broker, three `streamapp worker` processes of
``tests/integration/apps/rebalance.py`` (a changelog-backed rocksdict table holding the latest
value of every key) and loads TABLE_KEYS keys. Then, measured:

- crash: ``kill -9`` one worker; the others take over (the crashed one then comes back, unmeasured);
- kill -9 + restart: ``kill -9`` one worker and restart it at once on its data dir. A static
  member (streamapp's default, ``--no-static-membership`` turns it off) takes its place back
  with no rebalance; a dynamic one rejoins under a new member id, and the rebalance its join
  starts waits for the dead member's session (8 s in the app) to time out. Also measured: wall
  seconds from the kill until the group has committed the events written right after it;
- rolling restart: each worker in turn stops, events arrive while it is away, it restarts on its
  data dir;
- scale-out: a fourth worker joins (for streamapp, until after its follow-up rebalance).

Changelog records replayed and seconds to resume come from each worker's
``/streamapp/assignment`` view (Faust's recovery, measured the same way under either assignor):
records summed over every rebalance of the step, seconds the longest pause of any worker.

Run: ``make bench`` or ``.venv/bin/python -m bench.rebalance [--keys N] [--exactly-once]
[--no-static-membership] [--steps STEP,...]`` (``--exactly-once``: the app under
``processing_guarantee="exactly_once"``; stock Faust always runs with dynamic members, as it
does by itself).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from streamapp.kafka import LocalKafka
from streamapp.kafka.probe import free_port
from streamapp.testing.kafka_io import create_topic, produce
from streamapp.testing.worker import WorkerProcess

APP = "tests.integration.apps.rebalance:app"
PARTITIONS = 12
#: Kafka Streams' default is 10,000; the benchmark's partitions hold ~8,000 records each, so
#: a much smaller value is what makes "caught up" mean something here.
ACCEPTABLE_LAG = 50
TAIL_EVENTS = 1200  # written while a worker is away: ~100 per partition
ASSIGNORS = {
    "stock faust": "faust.assignor:PartitionAssignor",
    "streamapp": "",  # streamapp.App's own
}
STEPS = ("crash", "kill -9 + restart", "rolling restart", "scale-out")


@dataclass
class StepCost:
    records_replayed: int = 0
    seconds_to_resume: float = 0.0
    worst_partition: int = 0  # most records any one partition replayed in one rebalance
    rebalances: int = 0  # assignments the workers resumed processing after, all together
    wall_seconds: float = 0.0  # kill -9 + restart: from the kill to every event committed


@dataclass
class Run:
    label: str
    app_id: str
    bootstrap: str
    root: Path
    keys: int
    loglevel: str = "info"
    workers: dict[str, WorkerProcess] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)
    produced: int = 0
    why: str = ""

    @property
    def topic(self) -> str:
        return f"{self.app_id}-events"

    def start(self, name: str) -> None:
        worker = WorkerProcess(
            APP, self.bootstrap, self.root / name, "--client-id", name, "-l", self.loglevel
        )
        self.workers[name] = worker.start()
        self.seen[name] = 0

    def view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.workers[name].get_json("/streamapp/assignment")
        return view

    def produce(self, seqs: range, key_of: Callable[[int], str]) -> None:
        for seq in seqs:
            self.expected[key_of(seq)] = seq
        asyncio.run(produce(self.bootstrap, self.topic, seqs, key_of))

    def settled(self) -> bool:
        self.why = self._unsettled()
        return self.why == ""

    def _unsettled(self) -> str:
        """Why the group is not settled yet ("" when it is)."""
        views = {name: self.view(name) for name in self.workers}
        generations = {v["generation"] for v in views.values()}
        if len(generations) != 1:
            return f"generations differ: {generations}"
        held: list[int] = []
        for name, v in views.items():
            if not v["history"] or v["history"][-1]["generation"] != v["generation"]:
                return f"{name} has not resumed generation {v['generation']}"
            if v["followup_pending"]:
                return f"{name} waits for a follow-up rebalance"
            held.extend(v["active"].get(self.topic, []))
        if sorted(held) != list(range(PARTITIONS)):
            return f"partitions held: {sorted(held)}"
        if not asyncio.run(_all_consumed(self.bootstrap, self.app_id, self.topic)):
            return "events not all consumed"
        return ""

    def table_errors(self) -> int:
        """Keys whose value in the table is not the last one produced (or that are missing)."""
        table: dict[str, int] = {}
        for worker in self.workers.values():
            table.update(worker.get_json("/latest/"))
        return sum(1 for key, seq in self.expected.items() if table.get(key) != seq)

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except OSError:
                pass
            time.sleep(1.0)
        tails = "\n".join(f"--- {n}\n{w.log_tail(10)}" for n, w in self.workers.items())
        raise SystemExit(f"bench: {self.label}: timed out waiting for {what} ({self.why})\n{tails}")

    def cost_since_mark(self) -> StepCost:
        """What every rebalance since the last mark cost, then a new mark."""
        cost = StepCost()
        for name in self.workers:
            history = self.view(name)["history"]
            for entry in history[self.seen[name] :]:
                cost.records_replayed += entry["records_replayed"] or 0
                cost.seconds_to_resume = max(
                    cost.seconds_to_resume, entry["seconds_to_resume"] or 0.0
                )
                for parts in entry["by_partition"].values():
                    cost.worst_partition = max(cost.worst_partition, *parts.values(), 0)
            cost.rebalances += len(history) - self.seen[name]
            self.seen[name] = len(history)
        return cost

    def mark(self) -> None:
        self.cost_since_mark()

    def stop_all(self) -> None:
        for worker in self.workers.values():
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()


async def _all_consumed(bootstrap: str, group: str, topic: str) -> bool:
    """The group has committed every event of ``topic`` (so it has processed them all).

    Asked through the admin API: a consumer with the group's id would disturb the group.
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        ends = await consumer.end_offsets(tps)
        return all(
            (meta := committed.get(tp)) is not None and meta.offset >= ends[tp] for tp in tps
        )
    finally:
        await consumer.stop()
        await admin.close()


def run_one(
    label: str,
    assignor: str,
    bootstrap: str,
    root: Path,
    keys: int,
    guarantee: str,
    *,
    static: bool,
    steps: tuple[str, ...] = STEPS,
    loglevel: str = "info",
) -> dict[str, Any]:
    app_id = "bench-" + label.replace(" ", "-")
    os.environ.update(
        STREAMAPP_STATIC_MEMBERSHIP=str(static).lower(),
        REBALANCE_GUARANTEE=guarantee,
        REBALANCE_APP_ID=app_id,
        REBALANCE_ASSIGNOR=assignor,
        REBALANCE_PARTITIONS=str(PARTITIONS),
        REBALANCE_ACCEPTABLE_LAG=str(ACCEPTABLE_LAG),
        REBALANCE_PROBING_S="10",
    )
    run = Run(label, app_id, bootstrap, root / app_id, keys, loglevel)
    asyncio.run(create_topic(bootstrap, run.topic, PARTITIONS))
    results: dict[str, Any] = {}
    try:
        for name in ("w1", "w2", "w3"):
            run.start(name)
        started = time.monotonic()
        run.produce(range(keys), lambda seq: f"key-{seq}")
        run.produced = keys
        run.wait("the table to be loaded", run.settled)
        print(f"bench: {label}: {keys} keys loaded in {time.monotonic() - started:.0f} s")
        time.sleep(5)  # standbys finish replicating the load
        run.mark()

        if "crash" in steps:
            run.workers["w3"].stop(signal.SIGKILL)
            del run.workers["w3"]
            run.wait("the survivors to take over", run.settled)
            results["crash"] = run.cost_since_mark()
            run.start("w3")
            run.wait("the crashed worker to come back", run.settled)
            time.sleep(5)
            run.mark()

        if "kill -9 + restart" in steps:
            killed = time.monotonic()
            run.workers["w3"].stop(signal.SIGKILL)
            run.start("w3")  # at once, on its data dir (a new process: its history starts anew)
            base = run.produced
            run.produce(range(base, base + TAIL_EVENTS), lambda seq: f"key-{seq % keys}")
            run.produced = base + TAIL_EVENTS
            run.wait("the restarted worker back and every event committed", run.settled)
            restart = run.cost_since_mark()
            restart.wall_seconds = time.monotonic() - killed
            results["kill -9 + restart"] = restart
            time.sleep(5)
            run.mark()

        rolling = StepCost()
        for name in ("w1", "w2", "w3") if "rolling restart" in steps else ():
            run.workers[name].stop()
            run.workers.pop(name)
            run.wait(f"the others to cover for {name}", run.settled)
            base = run.produced
            run.produce(range(base, base + TAIL_EVENTS), lambda seq: f"key-{seq % keys}")
            run.produced = base + TAIL_EVENTS
            run.wait(f"the events written while {name} is away", run.settled)
            _add(rolling, run.cost_since_mark())
            run.start(name)
            run.wait(f"{name} to come back", run.settled)
            time.sleep(2)
            _add(rolling, run.cost_since_mark())
        results["rolling restart"] = rolling
        time.sleep(5)
        run.mark()

        if "scale-out" in steps:
            run.start("w4")
            run.wait(
                "w4 to take its share",
                lambda: run.settled() and bool(run.view("w4")["active"].get(run.topic)),
            )
            results["scale-out"] = run.cost_since_mark()
        results["table errors"] = run.table_errors()
    finally:
        run.stop_all()
    return results


def _add(total: StepCost, more: StepCost) -> None:
    total.records_replayed += more.records_replayed
    total.seconds_to_resume = max(total.seconds_to_resume, more.seconds_to_resume)
    total.worst_partition = max(total.worst_partition, more.worst_partition)
    total.rebalances += more.rebalances


def _table(
    results: dict[str, dict[str, Any]],
    keys: int,
    guarantee: str,
    *,
    static: bool,
    steps: tuple[str, ...] = STEPS,
) -> str:
    # A run left out (--assignors) shows as zeros.
    unmeasured: dict[str, Any] = {step: StepCost() for step in STEPS} | {"table errors": "-"}
    stock = results.get("stock faust", unmeasured)
    ours = results.get("streamapp", unmeasured)
    lines = [
        f"rebalance cost, {keys:,} keys, {PARTITIONS} partitions, 1 standby, "
        f"acceptable_recovery_lag={ACCEPTABLE_LAG}, {guarantee}, streamapp "
        f"{'static' if static else 'dynamic'} members (stock faust: dynamic)",
        f"{'step':<18} {'stock replayed':>15} {'ours replayed':>14} {'ratio':>7} "
        f"{'stock s':>8} {'ours s':>7} {'ours worst/partition':>21} "
        f"{'stock rebal.':>12} {'ours rebal.':>11}",
    ]
    for step in steps:
        s, o = stock[step], ours[step]
        ratio = f"{o.records_replayed / s.records_replayed:.1%}" if s.records_replayed else "-"
        lines.append(
            f"{step:<18} {s.records_replayed:>15,} {o.records_replayed:>14,} {ratio:>7} "
            f"{s.seconds_to_resume:>8.1f} {o.seconds_to_resume:>7.1f} {o.worst_partition:>21,} "
            f"{s.rebalances:>12} {o.rebalances:>11}"
        )
    if "kill -9 + restart" in steps:
        s, o = stock["kill -9 + restart"], ours["kill -9 + restart"]
        lines.append(
            f"kill -9 + restart, wall seconds from the kill to every event committed: "
            f"stock {s.wall_seconds:.1f}, ours {o.wall_seconds:.1f}"
        )
    lines.append(
        f"table keys wrong or missing at the end: stock {stock['table errors']}, "
        f"ours {ours['table errors']}"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument(
        "--exactly-once", action="store_true", help='processing_guarantee="exactly_once"'
    )
    parser.add_argument(
        "--static-membership",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="streamapp's workers join as static members (default: on, as streamapp's "
        "default; stock Faust's always join as dynamic ones)",
    )
    parser.add_argument(
        "--steps",
        default=",".join(STEPS),
        help=f"the steps to measure, comma-separated, in their order (default: {','.join(STEPS)})",
    )
    parser.add_argument(
        "--assignors",
        default=",".join(ASSIGNORS),
        help=f"the runs to make, comma-separated (default: {','.join(ASSIGNORS)})",
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        help="keep the broker's and workers' data dirs and logs (<app id>/<worker>.log) here "
        "(default: a temporary directory, removed at the end)",
    )
    parser.add_argument(
        "-l",
        "--loglevel",
        default="info",
        choices=["debug", "info", "warning"],
        help="the workers' log level (default: %(default)s)",
    )
    args = parser.parse_args()
    guarantee = "exactly_once" if args.exactly_once else "at_least_once"
    steps = tuple(step.strip() for step in args.steps.split(","))
    unknown = set(steps) - set(STEPS)
    if unknown:
        parser.error(f"--steps: unknown {', '.join(sorted(unknown))} (steps: {', '.join(STEPS)})")
    labels = tuple(label.strip() for label in args.assignors.split(","))
    if set(labels) - set(ASSIGNORS):
        parser.error(f"--assignors: one of {', '.join(ASSIGNORS)}")
    with tempfile.TemporaryDirectory(prefix="bench-rebalance-") as tmp:
        root = Path(tmp) if args.log_dir is None else args.log_dir
        root.mkdir(parents=True, exist_ok=True)
        broker = LocalKafka(port=free_port(), data_dir=root / "kafka")
        broker.start()
        try:
            results = {
                label: run_one(
                    label,
                    assignor,
                    broker.bootstrap,
                    root,
                    args.keys,
                    guarantee,
                    # Stock Faust joins as a dynamic member unless the app sets an instance id.
                    static=args.static_membership and label != "stock faust",
                    steps=steps,
                    loglevel=args.loglevel,
                )
                for label, assignor in ASSIGNORS.items()
                if label in labels
            }
        finally:
            broker.stop()
    print(_table(results, args.keys, guarantee, static=args.static_membership, steps=steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
