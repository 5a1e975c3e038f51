"""How long the surviving workers stand still when one worker is killed and restarted at once.

Three `streamapp worker` processes of ``bench/apps/rebalance_app.py`` (session timeout
8 s, the eager protocol) load KEYS keys; then one of them is killed with SIGKILL and restarted
on its data dir at once, and events keep arriving on every partition. Measured, once with
static members and once with dynamic ones, on one broker:

- survivors' rebalances: assignments the two surviving workers resumed processing after, since
  the kill (a static member's restart should cause none);
- survivors' longest pause: the longest time from a revocation to processing resumed, over those
  rebalances (each worker's ``/streamapp/assignment`` history; 0 when there was none);
- survivors resumed at: seconds from the kill until a survivor last resumed processing (0 when
  it never stopped);
- wall: seconds from the kill until the group has committed every event written after it.

Run: ``.venv/bin/python -m bench.kill_restart [--keys N] [--modes static,dynamic]``. Figures
are wall-clock times: meaningful only on a machine doing nothing else.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from pathlib import Path

from bench.rebalance import ACCEPTABLE_LAG, PARTITIONS, Run
from streamapp.kafka import LocalKafka
from streamapp.kafka.probe import free_port
from streamapp.testing.stop_signals import run_until_stopped

MODES = ("static", "dynamic")
TAIL_EVENTS = 1200


def measure(mode: str, bootstrap: str, root: Path, keys: int) -> dict[str, float | int]:
    app_id = f"bench-kill-restart-{mode}"
    os.environ.update(
        STREAMAPP_STATIC_MEMBERSHIP=str(mode == "static").lower(),
        # Eager, given explicitly: the figures (docs/operations.md) are eager's, where a dynamic
        # member's rejoin stops every worker; they keep their meaning whatever the default.
        STREAMAPP_REBALANCE_PROTOCOL="eager",
        REBALANCE_GUARANTEE="at_least_once",
        REBALANCE_APP_ID=app_id,
        REBALANCE_ASSIGNOR="",
        REBALANCE_PARTITIONS=str(PARTITIONS),
        REBALANCE_ACCEPTABLE_LAG=str(ACCEPTABLE_LAG),
        REBALANCE_PROBING_S="10",
    )
    run = Run(mode, app_id, bootstrap, root / app_id, keys)
    run.create_topics()
    try:
        for name in ("w1", "w2", "w3"):
            run.start(name)
        run.produce(range(keys), lambda seq: f"key-{seq}")
        run.produced = keys
        run.wait("the table to be loaded", run.settled)
        time.sleep(5)  # standbys finish replicating the load
        run.mark()
        survivors = ("w1", "w2")
        before = {name: len(run.view(name)["history"]) for name in survivors}

        killed_wall, killed = time.time(), time.monotonic()
        run.workers["w3"].stop(signal.SIGKILL)
        run.start("w3")
        run.produce(range(keys, keys + TAIL_EVENTS), lambda seq: f"key-{seq % keys}")
        run.produced = keys + TAIL_EVENTS
        run.wait("the restarted worker back and every event committed", run.settled)
        wall = time.monotonic() - killed

        rebalances, longest, resumed_at = 0, 0.0, 0.0
        for name in survivors:
            entries = run.view(name)["history"][before[name] :]
            rebalances += len(entries)
            for entry in entries:
                longest = max(longest, entry["seconds_to_resume"] or 0.0)
                resumed_at = max(resumed_at, entry["at"] - killed_wall)
        return {
            "survivors' rebalances": rebalances,
            "survivors' longest pause s": longest,
            "survivors resumed at s": resumed_at,
            "wall s": wall,
            "table errors": run.table_errors(),
        }
    finally:
        run.stop_all()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=12_000)
    parser.add_argument("--modes", default=",".join(MODES), help="static, dynamic or both")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",")]
    if set(modes) - set(MODES):
        parser.error(f"--modes: one or both of {', '.join(MODES)}")
    with tempfile.TemporaryDirectory(prefix="bench-kill-restart-") as tmp:
        root = Path(tmp)
        broker = LocalKafka(port=free_port(), data_dir=root / "kafka")
        try:  # started inside: a stop while it starts still stops it
            broker.start()
            results = {mode: measure(mode, broker.bootstrap, root, args.keys) for mode in modes}
        finally:
            broker.stop()
    columns = list(next(iter(results.values())))
    what = f"{args.keys:,} keys, {PARTITIONS} partitions"
    print(f"kill -9 + immediate restart of 1 of 3 workers, {what}")
    print(f"{'members':<8} " + " ".join(f"{c:>26}" for c in columns))
    for mode, figures in results.items():
        cells = (f"{v:>26.2f}" if isinstance(v, float) else f"{v:>26}" for v in figures.values())
        print(f"{mode:<8} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    # SIGTERM stops it as Ctrl-C does: the finally blocks stop the broker and workers.
    raise SystemExit(run_until_stopped(main))
