"""A group of `streamapp worker` processes of tests/integration/apps/global_settings.py.

Each test gives its own app id (its own group and topics) and protocol. The group writes
settings (the global table) and events (the ordinary table), remembers what it wrote, and
answers from the workers' own views whether they hold all of it: every event partition active
on exactly one live worker, each processing its current plan, every live worker's global table
holding every setting written, and every event in its owner's table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamapp.testing.kafka_io import create_topic, produce
from streamapp.testing.worker import WorkerProcess

from .workers import merged_table, wait_for_workers

APP = "tests.integration.apps.global_settings:app"
PARTITIONS = 4  # the app's
SETTINGS_PARTITIONS = 2  # the app's


def create_topics(bootstrap: str, app_id: str) -> None:
    """The app's two input topics, for the group of ``app_id``."""
    for topic, count in ((f"{app_id}-events", PARTITIONS), (f"{app_id}-settings", 2)):
        asyncio.run(create_topic(bootstrap, topic, count))


class GlobalGroup:
    def __init__(self, bootstrap: str, root: Path, app_id: str, protocol: str) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.app_id = app_id
        self.protocol = protocol
        self.workers: dict[str, WorkerProcess] = {}
        self.settings: dict[str, int] = {}
        self.latest: dict[str, int] = {}
        self.settings_written = 0
        self.events_written = 0

    def start(self, name: str, env: dict[str, str] | None = None) -> WorkerProcess:
        """Start worker ``name`` (again, with its data, if it ran before)."""
        worker = self.workers.get(name) or WorkerProcess(
            APP,
            self.bootstrap,
            self.root / name,
            "--client-id",
            name,
            "--rebalance-protocol",
            self.protocol,
            env={"GLOBAL_APP_ID": self.app_id, **(env or {})},
        )
        self.workers[name] = worker.start()
        return worker

    def live(self) -> dict[str, WorkerProcess]:
        return {n: w for n, w in self.workers.items() if w.alive()}

    def write_settings(self, count: int) -> None:
        seqs = range(self.settings_written, self.settings_written + count)
        asyncio.run(produce(self.bootstrap, f"{self.app_id}-settings", seqs, _setting))
        self.settings.update({_setting(seq): seq for seq in seqs})
        self.settings_written += count

    def write_events(self, count: int) -> None:
        seqs = range(self.events_written, self.events_written + count)
        asyncio.run(produce(self.bootstrap, f"{self.app_id}-events", seqs, _event))
        self.latest.update({_event(seq): seq for seq in seqs})
        self.events_written += count

    def view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.workers[name].get_json("/streamapp/assignment")
        return view

    def settled(self) -> bool:
        """Every event partition active on exactly one live worker, each processing its
        current plan, every live worker holding every setting, and every event in the table
        (a key served by two workers fails: a partition active on both)."""
        held: list[int] = []
        live = self.live()
        for name, worker in live.items():
            v = self.view(name)
            if v["followup_pending"] or not v["history"]:
                return False
            if v["history"][-1]["plan_generation"] != v["plan_generation"]:
                return False
            held.extend(v["active"].get(f"{self.app_id}-events", []))
            if worker.get_json("/settings/") != self.settings:
                return False
        if sorted(held) != list(range(PARTITIONS)):
            return False
        return bool(merged_table(live.values(), "/latest/") == self.latest)

    def wait(
        self,
        what: str,
        check: Callable[[], bool] | None = None,
        *,
        timeout: float = 180.0,
        details: Callable[[], str] = lambda: "",
        log_lines: int = 30,
    ) -> None:
        """Until ``check`` (by default `settled`) holds; the live workers' logs if it does not."""
        wait_for_workers(
            self.live(),
            what,
            check or self.settled,
            timeout=timeout,
            details=details,
            log_lines=log_lines,
        )

    def stop_all(self) -> None:
        for worker in self.workers.values():
            if worker.alive():
                worker.stop()


def _setting(seq: int) -> str:
    return f"s{seq}"


def _event(seq: int) -> str:
    return f"e{seq}"
