"""Rebalance cost, stock Faust's assignor against streamapp's, on the same app, data and steps.

Each run starts three `streamapp worker` processes of ``bench/apps/rebalance_app.py`` (the
rebalance tests' app: a changelog-backed rocksdict table holding the latest value of every key,
plus a ticks topic co-partitioned with its events) and loads TABLE_KEYS keys. Then a steady
stream of ticks (``--tick-rate`` per partition per second) runs on every partition, and each
worker notes when it processed each tick. Measured:

- crash: ``kill -9`` one worker; the others take over (the crashed one then comes back, unmeasured);
- kill -9 + restart: ``kill -9`` one worker and restart it at once on its data dir. A static
  member takes its place back with no rebalance; a dynamic one rejoins under a new member id,
  and the rebalance its join starts waits for the dead member's session (8 s in the app) to
  time out. Also measured: wall seconds from the kill until the group has committed the events
  written right after it;
- rolling restart: each worker in turn stops, events arrive while it is away, it restarts on its
  data dir. In the ``static no-leave`` run (``--no-leave-group-on-stop``) a stop keeps the
  worker's place, so the others do not cover for it: it stops, the events are written, it
  starts again at once and takes its partitions back with no rebalance of the others;
- scale-out: a fourth worker joins, until the group has settled;
- follow-up: the part of the scale-out from the first follow-up rebalance a worker asks for
  (its warmups caught up, or the probing interval) to the end (none under stock Faust).

The runs (``--assignors``): stock Faust's assignor (eager protocol, dynamic members), and
streamapp's under the eager protocol, the cooperative one (both dynamic members) and the
cooperative one with static members, whose stops leave the group (``cooperative static``) or
keep their place (``static no-leave``). Each run's protocol and membership are passed to its
workers explicitly, whatever streamapp's defaults.

Changelog records replayed and seconds to resume come from each worker's
``/streamapp/assignment`` view (Faust's recovery, measured the same way under either assignor):
records summed over every rebalance of the step, seconds the longest pause of any worker.

Stopped: the longest time any partition that did not move went without processing a tick, from
the step's start to the group settled again (raw: it includes the ticks' own interval, shown in
the table's title). A partition did not move when the same worker owned it before the step,
after it and at every rebalance in between, and that worker ran throughout the step (the
killed or restarted worker's partitions are left out). For the scale-out and its follow-up,
the partitions that moved in either are left out of both. `bench.lib.stopped` computes it.

Run: ``make bench`` or ``.venv/bin/python -m bench.rebalance [--keys N] [--exactly-once]
[--assignors RUN,...] [--steps STEP,...] [--tick-rate N]`` (``--exactly-once``: the app under
``processing_guarantee="exactly_once"``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import murmur2

from bench.lib import stopped as gaps
from bench.lib.processed_log import processing_times
from bench.lib.ticker import Ticker
from streamapp.kafka import LocalKafka
from streamapp.kafka.probe import free_port
from streamapp.testing.kafka_io import create_topic, produce
from streamapp.testing.stop_signals import run_until_stopped
from streamapp.testing.worker import WorkerProcess

APP = "bench.apps.rebalance_app:app"
PARTITIONS = 12
#: Kafka Streams' default is 10,000; the benchmark's partitions hold ~8,000 records each, so
#: a much smaller value is what makes "caught up" mean something here.
ACCEPTABLE_LAG = 50
TAIL_EVENTS = 1200  # written while a worker is away: ~100 per partition
#: Ticks per partition per second: 20 ms apart, 600 records/s in all, light on 2 cores.
TICK_RATE = 50.0
STEPS = ("crash", "kill -9 + restart", "rolling restart", "scale-out")
#: Measured within the scale-out step, shown as a step of its own.
FOLLOW_UP = "follow-up"
#: What a worker logs as it asks the group for a follow-up rebalance (standby.runtime).
FOLLOW_UP_ASKED = "asking the group for the follow-up rebalance"


@dataclass(frozen=True)
class RunKind:
    """One run of the benchmark: whose assignor, which protocol, which membership."""

    assignor: str  # "" for streamapp.App's own
    protocol: str
    static: bool
    #: A stop leaves the group (streamapp's default), or keeps a static member's place.
    leave_on_stop: bool = True

    def worker_options(self) -> tuple[str, ...]:
        membership = "--static-membership" if self.static else "--no-static-membership"
        options = ("--rebalance-protocol", self.protocol, membership)
        return options if self.leave_on_stop else (*options, "--no-leave-group-on-stop")


RUNS = {
    # Stock Faust joins as a dynamic member unless the app sets an instance id.
    "stock faust": RunKind("faust.assignor:PartitionAssignor", "eager", static=False),
    "eager": RunKind("", "eager", static=False),
    "cooperative": RunKind("", "cooperative", static=False),
    "cooperative static": RunKind("", "cooperative", static=True),
    "static no-leave": RunKind("", "cooperative", static=True, leave_on_stop=False),
}
#: ``--assignors streamapp``: every run of streamapp's assignor.
RUN_ALIASES = {"streamapp": ("eager", "cooperative", "cooperative static", "static no-leave")}
BASELINE = "stock faust"


class RunFailed(Exception):
    """A run that could not go on (the group never settled): the table says why, the other
    runs go on."""


@dataclass
class StepCost:
    records_replayed: int = 0
    seconds_to_resume: float = 0.0
    worst_partition: int = 0  # most records any one partition replayed in one rebalance
    rebalances: int = 0  # assignments the workers resumed processing after, all together
    wall_seconds: float = 0.0  # kill -9 + restart: from the kill to every event committed
    stopped: gaps.Stopped | None = None  # None: not measured (no ticks)


@dataclass
class Window:
    """One measured stretch of a step: when it ran and who owned what around it."""

    start: float  # wall clock (epoch seconds), as the workers' processed logs
    before: dict[int, str]
    interrupted: tuple[str, ...] = ()


@dataclass
class Run:
    label: str
    app_id: str
    bootstrap: str
    root: Path
    keys: int
    loglevel: str = "info"
    worker_options: tuple[str, ...] = ()
    workers: dict[str, WorkerProcess] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)
    produced: int = 0
    why: str = ""

    @property
    def topic(self) -> str:
        return f"{self.app_id}-events"

    @property
    def ticks_topic(self) -> str:
        return f"{self.app_id}-ticks"

    def create_topics(self) -> None:
        for topic in (self.topic, self.ticks_topic):
            asyncio.run(create_topic(self.bootstrap, topic, PARTITIONS))

    def processed_log(self, name: str) -> Path:
        return self.root / f"{name}.processed"

    def start(self, name: str) -> None:
        worker = WorkerProcess(
            APP,
            self.bootstrap,
            self.root / name,
            "--client-id",
            name,
            "-l",
            self.loglevel,
            *self.worker_options,
            env={"REBALANCE_PROCESSED_LOG": str(self.processed_log(name))},
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

    def owners(self) -> dict[int, str]:
        """Each partition's owner now, by the workers' views."""
        return {
            p: name for name in self.workers for p in self.view(name)["active"].get(self.topic, [])
        }

    def table_errors(self) -> int:
        """Keys whose value in the table is not the last one produced (or that are missing)."""
        table: dict[str, int] = {}
        for worker in self.workers.values():
            table.update(worker.get_json("/latest/"))
        wrong = {key: seq for key, seq in self.expected.items() if table.get(key) != seq}
        if wrong:
            self._describe_wrong(wrong, table)
        return len(wrong)

    def _describe_wrong(self, wrong: dict[str, int], table: dict[str, int]) -> None:
        """Which partitions the wrong keys are in, and whether stale or missing: the cause
        shows there (a store recovered from an old offset, a partition's records dropped...)."""
        owners = self.owners()
        by_partition: dict[int, list[str]] = {}
        for key in wrong:
            by_partition.setdefault(_partition_of(key), []).append(key)
        for partition, keys in sorted(by_partition.items()):
            missing = sum(1 for k in keys if k not in table)
            stale = [k for k in keys if k in table and table[k] < wrong[k]]
            examples = ", ".join(f"{k}={table.get(k)} (want {wrong[k]})" for k in keys[:3])
            print(
                f"bench: {self.label}: partition {partition} (owner {owners.get(partition)}): "
                f"{len(keys)} wrong, {missing} missing, {len(stale)} stale; e.g. {examples}"
            )

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
        print(f"bench: {self.label}: timed out waiting for {what} ({self.why})\n{tails}")
        raise RunFailed(f"timed out waiting for {what} ({self.why})")

    def entries_since_mark(self) -> dict[str, list[dict[str, Any]]]:
        """Each worker's rebalances (history entries) since the last mark, then a new mark."""
        entries: dict[str, list[dict[str, Any]]] = {}
        for name in self.workers:
            history = self.view(name)["history"]
            entries[name] = history[self.seen[name] :]
            self.seen[name] = len(history)
        return entries

    def cost_since_mark(self) -> StepCost:
        """What every rebalance since the last mark cost, then a new mark."""
        return _cost(self.entries_since_mark())

    def mark(self) -> None:
        self.entries_since_mark()

    def window(self, *interrupted: str) -> Window:
        """A measured stretch starts now (call before the step's first action)."""
        return Window(time.time(), self.owners(), interrupted)

    def stopped(
        self,
        window: Window,
        entries: dict[str, list[dict[str, Any]]],
        end: float | None = None,
        *,
        start: float | None = None,
    ) -> gaps.Stopped:
        """The "stopped" figure of ``window`` (settled now), over ``[start, end]`` of it."""
        held = [
            (name, entry["active"].get(self.topic, []))
            for name, listed in entries.items()
            for entry in listed
        ]
        partitions = gaps.unmoved(window.before, self.owners(), held, window.interrupted)
        times = processing_times(self.processed_log(name) for name in ("w1", "w2", "w3", "w4"))
        return gaps.stopped(
            times,
            partitions,
            window.start if start is None else start,
            time.time() if end is None else end,
        )

    def follow_up_asked_after(self, since: float) -> float | None:
        """When a worker first asked for a follow-up rebalance after ``since``, by its log."""
        asked = [
            at
            for worker in self.workers.values()
            for at in _logged_at(worker.log_path, FOLLOW_UP_ASKED)
            if at >= since
        ]
        return min(asked, default=None)

    def stop_all(self) -> None:
        for worker in self.workers.values():
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()


_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def _logged_at(log: Path, text: str) -> list[float]:
    """The times (epoch seconds) of a worker's log lines that hold ``text``.

    A worker's log lines start with Faust's ``[YYYY-MM-DD HH:MM:SS,mmm]`` in local time.
    """
    try:
        lines = log.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    times = []
    for line in lines:
        if text in line and (match := _LOG_TIME.match(line)):
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
            times.append(stamp.timestamp())
    return times


def _cost(entries: dict[str, list[dict[str, Any]]]) -> StepCost:
    cost = StepCost()
    for listed in entries.values():
        for entry in listed:
            cost.records_replayed += entry["records_replayed"] or 0
            cost.seconds_to_resume = max(cost.seconds_to_resume, entry["seconds_to_resume"] or 0.0)
            for parts in entry["by_partition"].values():
                cost.worst_partition = max(cost.worst_partition, *parts.values(), 0)
            cost.rebalances += 1
    return cost


def _split(
    entries: dict[str, list[dict[str, Any]]], at: float
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """The rebalances that resumed before ``at``, and those that resumed from it on."""
    early = {name: [e for e in listed if e["at"] < at] for name, listed in entries.items()}
    late = {name: [e for e in listed if e["at"] >= at] for name, listed in entries.items()}
    return early, late


def _partition_of(key: str) -> int:
    """The events topic's partition of ``key`` (the producer's default partitioner)."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % PARTITIONS


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
    kind: RunKind,
    bootstrap: str,
    root: Path,
    keys: int,
    guarantee: str,
    *,
    steps: tuple[str, ...] = STEPS,
    loglevel: str = "info",
    tick_rate: float = TICK_RATE,
) -> dict[str, Any]:
    app_id = "bench-" + label.replace(" ", "-")
    os.environ.update(
        REBALANCE_GUARANTEE=guarantee,
        REBALANCE_APP_ID=app_id,
        REBALANCE_ASSIGNOR=kind.assignor,
        REBALANCE_PARTITIONS=str(PARTITIONS),
        REBALANCE_ACCEPTABLE_LAG=str(ACCEPTABLE_LAG),
        REBALANCE_PROBING_S="10",
    )
    run = Run(
        label,
        app_id,
        bootstrap,
        root / app_id,
        keys,
        loglevel,
        worker_options=kind.worker_options(),
    )
    run.create_topics()
    results: dict[str, Any] = {}
    ticker: Ticker | None = None
    try:
        for name in ("w1", "w2", "w3"):
            run.start(name)
        started = time.monotonic()
        run.produce(range(keys), lambda seq: f"key-{seq}")
        run.produced = keys
        run.wait("the table to be loaded", run.settled)
        print(f"bench: {label}: {keys} keys loaded in {time.monotonic() - started:.0f} s")
        ticker = Ticker(bootstrap, run.ticks_topic, PARTITIONS, tick_rate).start()
        time.sleep(5)  # standbys finish replicating the load; the ticks flow
        run.mark()

        if "crash" in steps:
            window = run.window("w3")
            run.workers["w3"].stop(signal.SIGKILL)
            del run.workers["w3"]
            run.wait("the survivors to take over", run.settled)
            entries = run.entries_since_mark()
            results["crash"] = _cost(entries)
            results["crash"].stopped = run.stopped(window, entries)
            run.start("w3")
            run.wait("the crashed worker to come back", run.settled)
            time.sleep(5)
            run.mark()

        if "kill -9 + restart" in steps:
            window = run.window("w3")
            killed = time.monotonic()
            run.workers["w3"].stop(signal.SIGKILL)
            run.start("w3")  # at once, on its data dir (a new process: its history starts anew)
            base = run.produced
            run.produce(range(base, base + TAIL_EVENTS), lambda seq: f"key-{seq % keys}")
            run.produced = base + TAIL_EVENTS
            run.wait("the restarted worker back and every event committed", run.settled)
            wall = time.monotonic() - killed
            entries = run.entries_since_mark()
            restart = _cost(entries)
            restart.wall_seconds = wall
            restart.stopped = run.stopped(window, entries)
            results["kill -9 + restart"] = restart
            time.sleep(5)
            run.mark()

        if "rolling restart" in steps:
            rolling = StepCost()
            each: list[gaps.Stopped] = []
            for name in ("w1", "w2", "w3"):
                window = run.window(name)
                run.workers[name].stop()
                run.workers.pop(name)
                if kind.leave_on_stop:
                    run.wait(f"the others to cover for {name}", run.settled)
                # Else its place is kept for it: nobody covers, it is back at once.
                base = run.produced
                run.produce(range(base, base + TAIL_EVENTS), lambda seq: f"key-{seq % keys}")
                run.produced = base + TAIL_EVENTS
                if kind.leave_on_stop:
                    run.wait(f"the events written while {name} is away", run.settled)
                entries = run.entries_since_mark()
                run.start(name)
                run.wait(f"{name} to come back", run.settled)
                time.sleep(2)
                back = run.entries_since_mark()
                both = {n: entries.get(n, []) + back.get(n, []) for n in {*entries, *back}}
                _add(rolling, _cost(both))
                each.append(run.stopped(window, both))
            rolling.stopped = gaps.worst(*each)
            results["rolling restart"] = rolling
            time.sleep(5)
            run.mark()

        if "scale-out" in steps:
            window = run.window()
            run.start("w4")
            run.wait(
                "w4 to take its share",
                lambda: run.settled() and bool(run.view("w4")["active"].get(run.topic)),
            )
            end = time.time()
            entries = run.entries_since_mark()
            asked = run.follow_up_asked_after(window.start)
            if asked is None:
                results["scale-out"] = _cost(entries)
                results["scale-out"].stopped = run.stopped(window, entries, end)
            else:
                early, late = _split(entries, asked)
                results["scale-out"] = _cost(early)
                results["scale-out"].stopped = run.stopped(window, entries, asked)
                results[FOLLOW_UP] = _cost(late)
                results[FOLLOW_UP].stopped = run.stopped(window, entries, end, start=asked)
        results["table errors"] = run.table_errors()
    except RunFailed as failure:
        results["failed"] = str(failure)
    finally:
        if ticker is not None:
            ticker.stop()
        run.stop_all()
    return results


def _add(total: StepCost, more: StepCost) -> None:
    total.records_replayed += more.records_replayed
    total.seconds_to_resume = max(total.seconds_to_resume, more.seconds_to_resume)
    total.worst_partition = max(total.worst_partition, more.worst_partition)
    total.rebalances += more.rebalances


def _ratio(ours: float | None, stock: float | None) -> str:
    if ours is None or not stock:
        return "-"
    return f"{ours / stock:.1%}"


def table(
    results: dict[str, dict[str, Any]],
    keys: int,
    guarantee: str,
    *,
    steps: tuple[str, ...] = STEPS,
    tick_rate: float = TICK_RATE,
) -> str:
    shown = [*steps, FOLLOW_UP] if "scale-out" in steps else list(steps)
    stock = results.get(BASELINE, {})
    lines = [
        f"rebalance cost, {keys:,} keys, {PARTITIONS} partitions, 1 standby, "
        f"acceptable_recovery_lag={ACCEPTABLE_LAG}, {guarantee}; ticks {tick_rate:g}/s per "
        f"partition ({1000 / tick_rate:.0f} ms apart: stopped is the raw gap, tick interval "
        f"included); ratios against {BASELINE}",
        f"{'step':<18} {'run':<19} {'replayed':>9} {'vs stock':>9} {'resume s':>9} "
        f"{'stopped s':>10} {'vs stock':>9} {'unmoved':>8} {'rebal.':>7} {'worst/partition':>16}",
    ]
    for step in shown:
        first = True
        for label, result in results.items():
            cost: StepCost | None = result.get(step)
            if cost is None:
                continue
            base: StepCost | None = stock.get(step)
            s = cost.stopped or gaps.Stopped(None, None, 0)
            lines.append(
                f"{step if first else '':<18} {label:<19} {cost.records_replayed:>9,} "
                f"{_ratio(cost.records_replayed, base.records_replayed if base else None):>9} "
                f"{cost.seconds_to_resume:>9.1f} {s.text():>10} "
                f"{_ratio(s.seconds, base.stopped.seconds if base and base.stopped else None):>9} "
                f"{f'{s.unmoved}/{PARTITIONS}':>8} {cost.rebalances:>7} "
                f"{cost.worst_partition:>16,}"
            )
            first = False
    if "kill -9 + restart" in steps:
        walls = ", ".join(
            f"{label} {result['kill -9 + restart'].wall_seconds:.1f}"
            for label, result in results.items()
            if "kill -9 + restart" in result
        )
        lines.append(
            f"kill -9 + restart, wall seconds from the kill to every event committed: {walls}"
        )
    lines.extend(_worst_stops(results, shown))
    errors = ", ".join(
        f"{label} {result.get('table errors', '-')}" for label, result in results.items()
    )
    lines.append(f"table keys wrong or missing at the end: {errors}")
    lines.extend(
        f"{label}: failed, its other steps not measured: {result['failed']}"
        for label, result in results.items()
        if "failed" in result
    )
    return "\n".join(lines)


def _worst_stops(results: dict[str, dict[str, Any]], shown: Iterable[str]) -> list[str]:
    """Where each step's worst stop began (local time, as the workers' logs say it), to find
    what the worker owning that partition was doing (``--log-dir``)."""
    found = []
    for step in shown:
        for label, result in results.items():
            cost: StepCost | None = result.get(step)
            s = cost.stopped if cost is not None else None
            if s is None or s.seconds is None or s.began is None:
                continue
            at = datetime.fromtimestamp(s.began).strftime("%H:%M:%S,%f")[:-3]
            found.append(
                f"{label}, {step}: partition {s.partition} stopped {s.seconds:.2f} s from {at}"
            )
    return [f"worst stops: {'; '.join(found)}"] if found else []


def _runs(names: Iterable[str]) -> list[str]:
    """The runs ``--assignors`` names, aliases expanded, in RUNS' order."""
    wanted: set[str] = set()
    for name in names:
        wanted.update(RUN_ALIASES.get(name, (name,)))
    unknown = wanted - set(RUNS)
    if unknown:
        raise ValueError(", ".join(sorted(unknown)))
    return [label for label in RUNS if label in wanted]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument(
        "--exactly-once", action="store_true", help='processing_guarantee="exactly_once"'
    )
    parser.add_argument(
        "--steps",
        default=",".join(STEPS),
        help=f"the steps to measure, comma-separated, in their order (default: {','.join(STEPS)}; "
        f"scale-out includes {FOLLOW_UP})",
    )
    parser.add_argument(
        "--assignors",
        default=",".join(RUNS),
        help=f"the runs to make, comma-separated (default: {','.join(RUNS)}; 'streamapp' for "
        f"{', '.join(RUN_ALIASES['streamapp'])})",
    )
    parser.add_argument(
        "--tick-rate",
        type=float,
        default=TICK_RATE,
        help="ticks per partition per second during the steps (default: %(default)g)",
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
    try:
        labels = _runs(label.strip() for label in args.assignors.split(","))
    except ValueError as exc:
        parser.error(f"--assignors: unknown {exc} (runs: {', '.join([*RUNS, *RUN_ALIASES])})")
    with tempfile.TemporaryDirectory(prefix="bench-rebalance-") as tmp:
        root = Path(tmp) if args.log_dir is None else args.log_dir
        root.mkdir(parents=True, exist_ok=True)
        broker = LocalKafka(port=free_port(), data_dir=root / "kafka")
        try:  # started inside: a stop while it starts still stops it
            broker.start()
            results = {
                label: run_one(
                    label,
                    RUNS[label],
                    broker.bootstrap,
                    root,
                    args.keys,
                    guarantee,
                    steps=steps,
                    loglevel=args.loglevel,
                    tick_rate=args.tick_rate,
                )
                for label in labels
            }
        finally:
            broker.stop()
    print(table(results, args.keys, guarantee, steps=steps, tick_rate=args.tick_rate))
    return 0


if __name__ == "__main__":
    # SIGTERM stops it as Ctrl-C does: the finally blocks stop the broker and workers.
    raise SystemExit(run_until_stopped(main))
