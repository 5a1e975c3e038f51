"""A cooperative round that lands while a newcomer's first (eager) recovery is under way.

Real `streamapp worker` processes of tests/integration/apps/global_settings.py on a real broker,
under the cooperative protocol. A newcomer's first join is handled the eager way (it owned
nothing): every partition paused, and a recovery pass replays the whole global table. The
owners give up the partitions planned for it as they learn the plan, and the follow-up round
that hands them over comes next; while that first recovery runs, Faust's handlers take it the
eager way too (`streamapp.faust_compat.incremental.ready`). Whether it lands during the replay
depends on how long the replay takes; here it always does: the newcomer takes no changelog
record until that round begins (``STREAMAPP_TEST_ONLY_HOLD_FIRST_REPLAY``,
`streamapp.faust_compat.recovery_hold`), so the round finds records fetched and not applied,
as it found them in a CI run. Every setting must reach the newcomer's global table, every
event its owner's table (those written after the rounds included), and no worker's
``/streamapp/assignment`` view may list a source partition left paused. Checked from events
(log lines, views, the tables), never from timings.

Two ways this lost settings, both fixed: positions carried over into the join taken the eager
way (the newcomer held 5901 of 10,000; `streamapp.faust_compat.coordinator`), and the first
pass, cut short by the round, resuming the flow before the new pass had sought the changelogs:
the fetch loop dropped their first records below Faust's read marks of the first pass, and set
new marks from them after the new pass's seek (9600 of 10,000, in 2 of 7 runs; transport fix
29). The first failed every time without its fix, the second only when the records in hand and
the new pass's seek crossed; unit tests fail every time without either
(tests/unit/streamapp/faust_compat/test_cooperative_join.py,
tests/unit/streamapp/test_hand_out.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from streamapp.faust_compat.recovery_hold import ENV as HOLD_ENV
from streamapp.testing.kafka_io import create_topic, produce
from streamapp.testing.worker import WorkerProcess

from .workers import merged_table, wait_for_workers

APP = "tests.integration.apps.global_settings:app"
PARTITIONS = 4  # the app's
SETTINGS = 10_000  # far more than the changelog queue holds (4096)
EVENTS = 1000
#: The newcomer's log line as it hears a cooperative round (its first join is eager: not logged).
SECOND_ROUND = "streamapp: cooperative rebalance of group"
#: The newcomer's log line as that round releases its held first replay (`recovery_hold`).
HELD_UNTIL_THE_ROUND = "TEST ONLY: first replay released by the next rebalance"


class Group:
    def __init__(self, bootstrap: str, root: Path, app_id: str) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.app_id = app_id
        self.workers: dict[str, WorkerProcess] = {}
        self.settings: dict[str, int] = {}
        self.latest: dict[str, int] = {}
        self.events = 0

    def start(self, name: str, env: dict[str, str] | None = None) -> WorkerProcess:
        worker = WorkerProcess(
            APP,
            self.bootstrap,
            self.root / name,
            "--client-id",
            name,
            "--rebalance-protocol",
            "cooperative",
            env={"GLOBAL_APP_ID": self.app_id, **(env or {})},
        )
        self.workers[name] = worker.start()
        return worker

    def write_settings(self, count: int) -> None:
        seqs = range(count)
        asyncio.run(produce(self.bootstrap, f"{self.app_id}-settings", seqs, lambda s: f"s{s}"))
        self.settings.update({f"s{seq}": seq for seq in seqs})

    def write_events(self, count: int) -> None:
        seqs = range(self.events, self.events + count)
        asyncio.run(produce(self.bootstrap, f"{self.app_id}-events", seqs, lambda s: f"e{s}"))
        self.latest.update({f"e{seq}": seq for seq in seqs})
        self.events += count

    def view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.workers[name].get_json("/streamapp/assignment")
        return view

    def paused(self) -> dict[str, Any]:
        return {name: self.view(name)["paused"] for name in self.workers}

    def state(self) -> str:
        """Per worker: settings held (of those written), source partitions paused."""
        return ", ".join(
            f"{name}: {len(worker.get_json('/settings/'))}/{len(self.settings)} settings, "
            f"paused {self.view(name)['paused']}"
            for name, worker in self.workers.items()
        )

    def settled(self) -> bool:
        """Every event partition active on exactly one worker, each processing its current
        plan, every worker holding every setting, and every event in the table."""
        held: list[int] = []
        for name, worker in self.workers.items():
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
        return merged_table(self.workers.values(), "/latest/") == self.latest

    def wait(self, what: str, check: Any = None) -> None:
        wait_for_workers(
            self.workers,
            what,
            check or self.settled,
            timeout=180.0,
            details=self.state,
            log_lines=40,
        )


@pytest.fixture
def group(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    app_id = "it-during-recovery"
    for topic, count in ((f"{app_id}-events", PARTITIONS), (f"{app_id}-settings", 2)):
        asyncio.run(create_topic(kafka_bootstrap, topic, count))
    group = Group(kafka_bootstrap, tmp_path_factory.mktemp(app_id), app_id)
    try:
        yield group
    finally:
        for worker in group.workers.values():
            if worker.alive():
                worker.stop()


def test_a_round_during_a_newcomers_first_replay_loses_nothing_and_pauses_nothing(
    group: Group,
) -> None:
    for name in ("w1", "w2"):
        group.start(name)
    group.write_settings(SETTINGS)
    group.write_events(EVENTS)
    group.wait("two workers holding every setting and event")

    w3 = group.start("w3", env={HOLD_ENV: "1"})

    def heard_second_round() -> bool:
        log = w3.log_path.read_text(errors="replace")
        # The hold was on (the variable's name is right), and that round ended it: its line
        # comes a moment after the round's own, as recovery takes the round up.
        return SECOND_ROUND in log and HELD_UNTIL_THE_ROUND in log

    # w3 applies no changelog record before it hears that round: it lands during the replay.
    group.wait("w3 to hear the follow-up round during its first replay", heard_second_round)
    # Written after the rounds: each reaches the table only through the partition's owner.
    group.write_events(EVENTS)
    group.wait("every setting on every worker, every event processed by its owner")
    views = {name: group.view(name) for name in group.workers}
    assert views["w3"]["active"].get(f"{group.app_id}-events"), views["w3"]
    assert group.paused() == {name: {} for name in group.workers}
