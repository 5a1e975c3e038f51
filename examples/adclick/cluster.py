"""Worker processes of the ad-click app for the demo, its test and the benchmark.

Each worker is a real `streamapp worker` process (`streamapp.testing.worker.WorkerProcess`)
with its own data dir, web port and log file; it can be killed with SIGKILL (a crash: no clean
shutdown, no final commit) and restarted on the same data dir and client id.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from examples.adclick.topology import Topology
from streamapp.testing.worker import WorkerProcess

APP_SPEC = "examples.adclick.app:app"


class Worker(WorkerProcess):
    """A worker of the ad-click app: its client id is its name, its topology in its environment."""

    def __init__(self, name: str, bootstrap: str, topology: Topology, data_dir: Path) -> None:
        super().__init__(
            APP_SPEC,
            bootstrap,
            data_dir,
            "--client-id",
            name,
            "--loglevel",
            "info",
            env=topology.to_env(),
            name=name,
        )
        self.topology = topology


def active_partitions(views: list[dict[str, Any] | None], topic: str) -> set[int]:
    return {p for v in views if v for p in (v.get("active") or {}).get(topic, [])}


def wait_until_assigned(workers: list[Worker], topology: Topology, timeout: float) -> None:
    """Until every live worker answers, in one generation, and owns some of the join's partitions,
    and those partitions are all owned.

    A worker still joining the group answers too, with nothing assigned: the join's partitions
    are then all owned by the others, and a crash of that worker would test nothing.
    """
    deadline = time.monotonic() + timeout
    wanted = set(range(topology.partitions))
    each_owns_some = len(workers) <= topology.partitions
    while time.monotonic() < deadline:
        for w in workers:
            if not w.alive():
                raise RuntimeError(f"{w.name} exited while starting:\n{w.log_tail()}")
        views = [w.assignment() for w in workers]
        if (
            all(views)
            and len({v.get("generation") for v in views if v}) == 1
            and (
                not each_owns_some
                or all(active_partitions([v], topology.impressions) for v in views)
            )
            and active_partitions(views, topology.impressions) == wanted
        ):
            return
        time.sleep(0.5)
    raise TimeoutError(
        f"workers did not take all {topology.partitions} partitions within {timeout:.0f} s"
    )


def stop_all(workers: list[Worker], timeout: float = 30.0) -> None:
    """Clean shutdown of all workers at once: each one's shutdown takes seconds.

    Workers never started are skipped: a stop can come while a list of them is being started.
    """
    started = [w for w in workers if w.process is not None]
    for w in started:
        w.terminate()
    for w in started:
        w.stop(timeout=timeout)
