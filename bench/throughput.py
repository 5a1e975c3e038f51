"""Throughput of one stateful worker: streamapp, stock Faust and a plain aiokafka loop.

    .venv/bin/python -m bench.throughput [--records 30000] [--keys 5000] [--partitions 6]
        [--guarantee at_least_once --guarantee exactly_once] [--loglevel warning]
        [--profile DIR] [--py-spy DIR PY_SPY] [--each-win] [--rounds 1]

One run, one local broker. The app (``bench/apps/throughput_app.py``) keeps a per-key
running sum in a changelog table and sends an output record for every tenth input. For each
processing guarantee, each engine in turn (never two at once: the machine has few cores) gets
its own input topic, loaded in advance with ``--records`` records over ``--partitions``
partitions, and one worker process:

* streamapp: ``streamapp worker`` running the app as a `streamapp.App`;
* sa batches: the same, its agent reading the stream in batches (`streamapp.batches`);
* stock Faust: ``faust worker`` running the same agent in a plain `faust.App`;
* plain loop: an aiokafka consumer and producer (linger and batch size as streamapp's
  at-least-once defaults, 5 ms and 64 KiB; streamapp's 50 ms under exactly_once did not make
  the loop faster, docs/performance.md) doing the same durable work per record: a rocksdict
  get and put and a changelog record, an output record every tenth, offsets committed every
  2.8 s or 10,000 records as Faust does (under exactly_once, in a transaction with the
  records). This is the limit.

Each engine notes the wall and process CPU time (all its threads) at its first record and
after its last one is processed and acked, with its producer flushed; startup and loading are
not counted. Prints records/s, CPU µs per record, the changelog records each input record left
in the table's changelog (counted once the worker stopped, committed records only: streamapp
sends a key's last write of a run or batch, a plain loop and stock Faust one per write) and the
ratios. ``--profile DIR`` also profiles the event-loop
thread of each Faust engine (cProfile, first record to last) and prints where its time goes
per record; ``--py-spy DIR PY_SPY`` samples each Faust engine's worker process with py-spy
(all threads, while they hold the GIL; not a project dependency) and prints where its CPU
went by block of the run (``bench/lib/gil_blocks.py``). ``--each-win`` adds streamapp runs
without its free wins (Faust's worker log levels, table encoding and producer defaults), all
of them and then each one, to show what each is worth. ``--rounds N`` runs every engine N
times, in turn (round by round, on one broker), prints each round's table and then the
medians, with each ratio taken within its round (median and spread): on a shared 2-core
machine one round's ratio moves by about a tenth from run to run. Never part of the tests;
ratios measured within one run are what count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.lib import gil_blocks
from streamapp.kafka import LocalKafka
from streamapp.kafka.probe import free_port
from streamapp.testing.kafka_io import partitions_of
from streamapp.testing.stop_signals import run_until_stopped

REPO_ROOT = Path(__file__).resolve().parents[1]

APP = "bench.apps.throughput_app:app"
ENGINES = ("streamapp", "sa batches", "stock faust", "plain loop")
#: streamapp without its free wins (--each-win): label -> THROUGHPUT_WITHOUT.
WITHOUT_WINS = {
    "sa no wins": "logging,encode,batching",
    "sa -logging": "logging",
    "sa -encode": "encode",
    "sa -batching": "batching",
}
GUARANTEES = ("at_least_once", "exactly_once")
OUTPUT_EVERY = 10
# Faust's defaults (broker_commit_interval, broker_commit_every), for the plain loop.
COMMIT_INTERVAL_S = 2.8
COMMIT_EVERY = 10_000
RUN_TIMEOUT_S = 600.0
# The plain loop's producer batching (streamapp's at-least-once defaults; 50 ms under
# exactly_once, streamapp's there, gave the loop nothing: docs/performance.md).
PLAIN_LINGER_MS = 5
PLAIN_MAX_BATCH_SIZE = 65536


def say(line: str) -> None:
    print(f"bench: {line}", file=sys.stderr, flush=True)


@dataclass
class Result:
    engine: str
    guarantee: str
    records: int
    wall_s: float
    cpu_s: float
    #: Records in the table's changelog after the run (read_committed), per input record.
    changelog_per_record: float = 0.0

    @property
    def per_s(self) -> float:
        return self.records / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cpu_us_per_record(self) -> float:
        return self.cpu_s / self.records * 1e6


async def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1) for name in names])
    finally:
        await admin.close()


async def load_input(bootstrap: str, topic: str, records: int, keys: int) -> None:
    """``records`` records, key ``k<i mod keys>``, value 1..9."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, max_batch_size=65536)
    await producer.start()
    try:
        for i in range(records):
            key = f"k{i % keys}"
            # Partitioned by key, as a table's source must be (the default partitioner).
            await producer.send(topic, key=key.encode(), value=str(1 + i % 9).encode())
        await producer.flush()
    finally:
        await producer.stop()


async def count_committed(bootstrap: str, topic: str) -> int:
    """How many committed records ``topic`` holds (transaction markers and aborted records not
    counted), read from its start to its end."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        partitions = await partitions_of(bootstrap, topic)
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return 0
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        count = 0

        async def behind() -> bool:
            for tp in tps:
                if await consumer.position(tp) < ends[tp]:
                    return True
            return False

        while await behind():
            fetched = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            count += sum(len(records) for records in fetched.values())
        return count
    finally:
        await consumer.stop()


# --- the plain loop (runs in its own process: `throughput.py --plain-loop ...`) -------------


async def plain_loop(args: argparse.Namespace) -> None:
    from rocksdict import Options, Rdict

    app_id: str = args.app_id
    source, changelog, output = f"{app_id}-input", f"{app_id}-changelog", f"{app_id}-output"
    exactly_once = args.guarantee == "exactly_once"
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=args.bootstrap,
        group_id=app_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap,
        linger_ms=PLAIN_LINGER_MS,
        max_batch_size=PLAIN_MAX_BATCH_SIZE,
        acks="all",
        enable_idempotence=exactly_once,
        transactional_id=f"{app_id}-plain" if exactly_once else None,
    )
    options = Options(raw_mode=True)
    stores = {
        p: Rdict(str(Path(args.data_dir) / f"sums-{p}"), options) for p in range(args.partitions)
    }
    await consumer.start()
    await producer.start()
    seen = 0
    first: tuple[float, float] | None = None
    pending: dict[TopicPartition, int] = {}
    since_commit = 0
    last_commit = time.monotonic()

    async def commit() -> None:
        nonlocal since_commit, last_commit
        offsets = dict(pending)
        pending.clear()
        since_commit = 0
        last_commit = time.monotonic()
        if exactly_once:
            await producer.send_offsets_to_transaction(offsets, app_id)
            await producer.commit_transaction()
            await producer.begin_transaction()
        else:
            # At least once: a committed offset only after its output is with the broker.
            await producer.flush()
            await consumer.commit(offsets)

    try:
        if exactly_once:
            await producer.begin_transaction()
        while seen < args.records:
            fetched = await consumer.getmany(timeout_ms=1000)
            for tp, messages in fetched.items():
                db = stores[tp.partition]
                for message in messages:
                    if first is None:
                        first = (time.monotonic(), time.process_time())
                    key = json.dumps(message.key.decode()).encode()
                    old = db.get(key)
                    total = (json.loads(old) if old is not None else 0) + int(message.value)
                    value = json.dumps(total).encode()
                    db[key] = value
                    await producer.send(changelog, value, key=key, partition=tp.partition)
                    seen += 1
                    if seen % OUTPUT_EVERY == 0:
                        await producer.send(output, value, key=key)
                pending[tp] = messages[-1].offset + 1
                since_commit += len(messages)
            if pending and (
                since_commit >= COMMIT_EVERY or time.monotonic() - last_commit >= COMMIT_INTERVAL_S
            ):
                await commit()
        await producer.flush()
        wall, cpu = time.monotonic(), time.process_time()
        Path(args.result).write_text(
            json.dumps({"records": seen, "first": first, "last": [wall, cpu]})
        )
        if pending:
            await commit()
    finally:
        await producer.stop()
        await consumer.stop()
        for db in stores.values():
            db.close()


# --- running each engine ---------------------------------------------------------------------


def engine_command(
    engine: str, args: argparse.Namespace, bootstrap: str, run_dir: Path
) -> list[str]:
    py = sys.executable
    if engine in ("streamapp", "sa batches") or engine in WITHOUT_WINS:
        return [
            py,
            "-m",
            "streamapp",
            "worker",
            "-A",
            APP,
            "--broker",
            bootstrap,
            "--data-dir",
            str(run_dir / "data"),
            "--web-port",
            str(free_port()),
            "-l",
            args.loglevel,
        ]
    if engine == "stock faust":
        level = "warn" if args.loglevel == "warning" else args.loglevel
        return [
            py,
            "-m",
            "faust",
            "-A",
            APP,
            "worker",
            "-l",
            level,
            "--web-port",
            str(free_port()),
            "--web-host",
            "127.0.0.1",
        ]
    return [py, str(Path(__file__).resolve()), "--plain-loop"]


def run_engine(
    engine: str,
    guarantee: str,
    args: argparse.Namespace,
    bootstrap: str,
    root: Path,
    round_no: int = 1,
) -> Result:
    slug = engine.replace(" ", "-").replace("--", "-")
    app_id = f"bench-tp-{slug}-{guarantee.replace('_', '-')}"
    if round_no > 1:  # each round's run its own topics, group and stores
        app_id += f"-r{round_no}"
    run_dir = root / app_id
    (run_dir / "data").mkdir(parents=True)
    result_path = run_dir / "result.json"
    topics = [f"{app_id}-input", f"{app_id}-output"]
    if engine == "plain loop":
        topics.append(f"{app_id}-changelog")
    asyncio.run(create_topics(bootstrap, topics, args.partitions))
    asyncio.run(load_input(bootstrap, topics[0], args.records, args.keys))
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(REPO_ROOT),
        "THROUGHPUT_ENGINE": "faust" if engine == "stock faust" else "streamapp",
        "THROUGHPUT_WITHOUT": WITHOUT_WINS.get(engine, ""),
        "THROUGHPUT_BATCHES": "1" if engine == "sa batches" else "0",
        "THROUGHPUT_APP_ID": app_id,
        "THROUGHPUT_PARTITIONS": str(args.partitions),
        "THROUGHPUT_GUARANTEE": guarantee,
        "THROUGHPUT_RECORDS": str(args.records),
        "THROUGHPUT_RESULT": str(result_path),
        "BROKER_URL": f"kafka://{bootstrap}",
        "APP_DATADIR": str(run_dir / "data"),
    }
    if args.profile and engine != "plain loop":
        env["THROUGHPUT_PROFILE"] = str(Path(args.profile) / f"{app_id}.prof")
    command = engine_command(engine, args, bootstrap, run_dir)
    if engine == "plain loop":
        command += [
            "--app-id",
            app_id,
            "--bootstrap",
            bootstrap,
            "--data-dir",
            str(run_dir / "data"),
            "--result",
            str(result_path),
            "--records",
            str(args.records),
            "--partitions",
            str(args.partitions),
            "--guarantee",
            guarantee,
        ]
    log_path = run_dir / "worker.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    sampler = sample_with_py_spy(process.pid, app_id, args) if engine != "plain loop" else None
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not result_path.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
                raise SystemExit(f"bench: {engine} ({guarantee}) did not finish:\n{tail}")
            time.sleep(0.2)
        time.sleep(0.2)  # the file is written in one call; let it land whole
        data = json.loads(result_path.read_text())
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if sampler is not None:  # it stops as the worker exits, and writes its file
            sampler.wait(60)
    # Under exactly_once a streamapp worker at -l info says, as it stops, what its pending
    # table writes took at most (docs/settings.md, eos_pending_writes_max_bytes).
    for line in log_path.read_text(errors="replace").splitlines():
        if "streamapp: exactly_once:" in line:
            say(f"{engine} ({guarantee}) worker: {line.split('streamapp: ', 1)[1].strip()}")
    (first_wall, first_cpu), (last_wall, last_cpu) = data["first"], data["last"]
    wall_s, cpu_s = last_wall - first_wall, last_cpu - first_cpu
    # The worker stopped (its last commit made): what its table's changelog holds.
    changelog = f"{app_id}-changelog" if engine == "plain loop" else f"{app_id}-sums-changelog"
    changelog_records = asyncio.run(count_committed(bootstrap, changelog))
    result = Result(
        engine, guarantee, data["records"], wall_s, cpu_s, changelog_records / data["records"]
    )
    say(
        f"{engine} ({guarantee}): {result.per_s:,.0f} records/s, "
        f"{result.cpu_us_per_record:.0f} µs CPU per record, "
        f"{result.changelog_per_record:.2f} changelog records per record"
    )
    return result


def sample_with_py_spy(
    pid: int, app_id: str, args: argparse.Namespace
) -> subprocess.Popen[bytes] | None:
    """``--py-spy``: py-spy samples the worker's threads holding the GIL (bench/lib/gil_blocks),
    from its start to its stop; the start and stop are left out of the summary."""
    if not args.py_spy:
        return None
    directory, py_spy = Path(args.py_spy[0]), args.py_spy[1]
    return subprocess.Popen(
        [
            py_spy,
            "record",
            "-p",
            str(pid),
            "--threads",
            "--gil",
            "--nonblocking",
            "-r",
            "250",
            "-f",
            "raw",
            "-o",
            str(directory / f"{app_id}.raw"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


# --- reporting ---------------------------------------------------------------------------------


def table(results: list[Result], args: argparse.Namespace) -> str:
    lines = [
        f"throughput, one worker: {args.records:,} records, {args.keys:,} keys, "
        f"{args.partitions} partitions, an output record every {OUTPUT_EVERY}th, "
        f"-l {args.loglevel}",
        f"{'guarantee':<14} {'engine':<13} {'records/s':>10} {'CPU µs/rec':>11} "
        f"{'changelog/rec':>14} {'vs stock faust':>15} {'vs plain loop':>14}",
    ]
    by = {(r.guarantee, r.engine): r for r in results}
    for guarantee in args.guarantee:
        stock = by.get((guarantee, "stock faust"))
        plain = by.get((guarantee, "plain loop"))
        for engine in args.engine:
            r = by.get((guarantee, engine))
            if r is None:
                continue
            vs_stock = f"{r.per_s / stock.per_s:.2f}x" if stock else "-"
            vs_plain = f"{r.per_s / plain.per_s:.3f}x" if plain else "-"
            lines.append(
                f"{guarantee:<14} {engine:<13} {r.per_s:>10,.0f} {r.cpu_us_per_record:>11.0f} "
                f"{r.changelog_per_record:>14.2f} {vs_stock:>15} {vs_plain:>14}"
            )
    if set(GUARANTEES) <= set(args.guarantee):
        for engine in args.engine:
            alo, eos = by.get(("at_least_once", engine)), by.get(("exactly_once", engine))
            if alo and eos:
                lines.append(
                    f"{engine}: exactly_once runs at {eos.per_s / alo.per_s:.2f}x "
                    "its at_least_once throughput"
                )
    return "\n".join(lines)


def rounds_summary(rounds: list[list[Result]], args: argparse.Namespace) -> str:
    """Over several rounds: each engine's median records/s and CPU per record, and its ratios to
    the plain loop and to its own at_least_once taken within each round (median, min to max)."""
    lines = [
        f"over {len(rounds)} rounds (each engine once per round, in turn): medians, and each "
        "ratio taken within a round (median, min-max)",
        f"{'guarantee':<14} {'engine':<13} {'records/s':>10} {'CPU µs/rec':>11} "
        f"{'changelog/rec':>14} {'vs stock faust':>24} {'vs plain loop':>24} {'EOS / ALO':>22}",
    ]

    def spread(values: list[float], digits: int) -> str:
        if not values:
            return "-"
        return (
            f"{statistics.median(values):.{digits}f}x "
            f"({min(values):.{digits}f}-{max(values):.{digits}f})"
        )

    by_round = [{(r.guarantee, r.engine): r for r in results} for results in rounds]
    for guarantee in args.guarantee:
        for engine in args.engine:
            runs = [by[(guarantee, engine)] for by in by_round if (guarantee, engine) in by]
            if not runs:
                continue
            vs_stock, vs_plain = (
                [
                    by[(guarantee, engine)].per_s / by[(guarantee, peer)].per_s
                    for by in by_round
                    if (guarantee, engine) in by and (guarantee, peer) in by
                ]
                for peer in ("stock faust", "plain loop")
            )
            eos_alo = [
                by[("exactly_once", engine)].per_s / by[("at_least_once", engine)].per_s
                for by in by_round
                if ("exactly_once", engine) in by and ("at_least_once", engine) in by
            ]
            lines.append(
                f"{guarantee:<14} {engine:<13} "
                f"{statistics.median(r.per_s for r in runs):>10,.0f} "
                f"{statistics.median(r.cpu_us_per_record for r in runs):>11.0f} "
                f"{statistics.median(r.changelog_per_record for r in runs):>14.2f} "
                f"{spread(vs_stock, 2):>24} {spread(vs_plain, 3):>24} "
                f"{spread(eos_alo, 2) if guarantee == 'exactly_once' else '':>22}"
            )
    return "\n".join(lines)


def profile_summary(path: Path, records: int, top: int) -> str:
    """Where the profiled thread's time went, per record, and the call counts that matter."""
    stats = pstats.Stats(str(path))
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_cc, _nc, tt, _ct, _callers) in entries.values())
    lines = [f"profile {path.name}: {total / records * 1e6:.0f} µs per record in the loop thread"]

    def calls(name: str, filename_part: str = "") -> float:
        return (
            sum(
                nc
                for (fn, _line, func), (_cc, nc, _tt, _ct, _c) in entries.items()
                if func == name and filename_part in fn
            )
            / records
        )

    lines.append(
        f"  per record: json.dumps {calls('dumps', 'json/__init__'):.2f}, "
        f"LogRecords built {calls('makeRecord'):.2f}, "
        f"producer.send {calls('send', 'aiokafka/producer/producer'):.2f}"
    )
    ranked = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[:top]
    for (fn, line, func), (_cc, nc, tt, _ct, _c) in ranked:
        where = fn.replace(str(REPO_ROOT), ".").split("site-packages/")[-1]
        lines.append(
            f"  {tt / records * 1e6:6.1f} µs  {nc / records:6.2f} calls  {func}  ({where}:{line})"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument(
        "--guarantee", action="append", choices=GUARANTEES, help="repeatable (default: both)"
    )
    parser.add_argument(
        "--engine",
        action="append",
        choices=[*ENGINES, *WITHOUT_WINS],
        help="repeatable (default: all four)",
    )
    parser.add_argument(
        "--loglevel",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="the workers' -l (default: %(default)s)",
    )
    parser.add_argument("--profile", metavar="DIR", help="cProfile each Faust engine into DIR")
    parser.add_argument(
        "--py-spy",
        nargs=2,
        metavar=("DIR", "PY_SPY"),
        help="sample each Faust engine's worker with the py-spy at PY_SPY (GIL samples, all "
        "threads) into DIR, and print where its CPU went by block",
    )
    parser.add_argument(
        "--each-win",
        action="store_true",
        help="also run streamapp without its free wins, all and each (see above)",
    )
    parser.add_argument("--top", type=int, default=25, help="functions shown per profile")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every engine this many times, in turn, and also print the medians and the "
        "spread of each ratio taken within a round (default: %(default)s)",
    )
    # The plain loop's own process.
    parser.add_argument("--plain-loop", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--app-id", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_loop:
        args.guarantee = (args.guarantee or ["at_least_once"])[0]
        asyncio.run(plain_loop(args))
        return 0
    args.guarantee = args.guarantee or list(GUARANTEES)
    args.engine = args.engine or list(ENGINES)
    if args.each_win:
        args.engine += list(WITHOUT_WINS)
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    if args.py_spy:
        Path(args.py_spy[0]).mkdir(parents=True, exist_ok=True)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    rounds: list[list[Result]] = []
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
        root = Path(tmp)
        broker = LocalKafka(port=free_port(), data_dir=root / "kafka")
        try:  # started inside: a stop while it starts still stops it
            broker.start()
            for round_no in range(1, args.rounds + 1):
                results: list[Result] = []
                for guarantee in args.guarantee:
                    for engine in args.engine:
                        results.append(
                            run_engine(engine, guarantee, args, broker.bootstrap, root, round_no)
                        )
                rounds.append(results)
                if args.rounds > 1:
                    say(f"round {round_no} of {args.rounds}:\n{table(results, args)}")
        finally:
            broker.stop()
            shutil.rmtree(root, ignore_errors=True)
    for results in rounds:
        print(table(results, args))
    if args.rounds > 1:
        print(rounds_summary(rounds, args))
    if args.profile:
        for path in sorted(Path(args.profile).glob("*.prof")):
            print(profile_summary(path, args.records, args.top))
    if args.py_spy:
        for path in sorted(Path(args.py_spy[0]).glob("*.raw")):
            print(gil_blocks.summary(path))
    return 0


if __name__ == "__main__":
    # SIGTERM stops it as Ctrl-C does: the finally blocks stop the broker and workers.
    raise SystemExit(run_until_stopped(main))
