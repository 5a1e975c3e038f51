"""A group of `streamapp worker` processes of tests/integration/apps/global_settings.py: the
cooperative tests' `WorkerGroup` (its events topic, the ``latest`` table's), plus the settings
it writes to the global table.

Each test gives its own app id (its own group and topics) and protocol. The group answers from
the workers' own views whether they hold all it wrote: every event partition active on exactly
one live worker, each processing its current plan, every live worker's global table holding
every setting written, and every event in its owner's table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from streamapp.testing.kafka_io import create_topic, produce
from streamapp.testing.worker import WorkerProcess

from .cooperative_group import WorkerGroup
from .workers import merged_table, wait_for_workers

APP = "tests.integration.apps.global_settings:app"
PARTITIONS = 4  # the app's
SETTINGS_PARTITIONS = 2  # the app's


def create_topics(bootstrap: str, app_id: str) -> None:
    """The app's two input topics, for the group of ``app_id``."""
    for topic, count in ((f"{app_id}-events", PARTITIONS), (f"{app_id}-settings", 2)):
        asyncio.run(create_topic(bootstrap, topic, count))


class GlobalGroup(WorkerGroup):
    def __init__(self, bootstrap: str, root: Path, app_id: str, protocol: str) -> None:
        super().__init__(APP, bootstrap, root, f"{app_id}-events", _event)
        self.app_id = app_id
        self.protocol = protocol
        self.settings: dict[str, int] = {}
        self.settings_written = 0

    def start(self, name: str, env: dict[str, str] | None = None) -> WorkerProcess:
        """Start worker ``name`` (again, the same process object on its data, if it ran
        before: its log goes on)."""
        if name in self.workers:
            return self.workers[name].start()
        return self.start_worker(
            name, env={"GLOBAL_APP_ID": self.app_id, **(env or {})}, protocol=self.protocol
        )

    def live(self) -> dict[str, WorkerProcess]:
        return {n: w for n, w in self.workers.items() if w.alive()}

    def write_settings(self, count: int) -> None:
        seqs = range(self.settings_written, self.settings_written + count)
        asyncio.run(produce(self.bootstrap, f"{self.app_id}-settings", seqs, _setting))
        self.settings.update({_setting(seq): seq for seq in seqs})
        self.settings_written += count

    def write_events(self, count: int) -> None:
        self.produce(count)

    def settled(self) -> bool:
        """Every event partition active on exactly one live worker, each processing its
        current plan, every live worker holding every setting, and every event in the table
        (a key served by two workers fails: a partition active on both)."""
        live = self.live()
        if not self.assignment_settled(live, PARTITIONS):
            return False
        if any(worker.get_json("/settings/") != self.settings for worker in live.values()):
            return False
        return bool(merged_table(live.values(), "/latest/") == self.expected)

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


def _setting(seq: int) -> str:
    return f"s{seq}"


def _event(seq: int) -> str:
    return f"e{seq}"
