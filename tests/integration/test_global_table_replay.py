"""What a worker replays of a global table: only what it does not hold yet, never from the start.

Real `streamapp worker` processes of tests/integration/apps/global_settings.py on a real broker,
under each rebalance protocol. Every worker holds every partition of the global table's
changelog, on local disk with its offset; so a rebalance (another worker joining, or leaving)
and a restart of the worker itself replay only the records written since it last stored one.
Counted from each worker's own report of what it replayed at each rebalance (the
``by_partition`` counts of its ``/streamapp/assignment`` history), never from timings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamapp.testing.kafka_io import end_offsets
from streamapp.testing.worker import WorkerProcess

from .global_group import GlobalGroup, create_topics

SETTINGS = 2000  # settings keys written before any rebalance measured
EVENTS = 2000  # event keys (the ordinary table) written before any rebalance measured
TAIL = 20  # settings written while a worker is away (no events are)


class Group(GlobalGroup):
    def __init__(self, bootstrap: str, root: Path, app_id: str, protocol: str) -> None:
        super().__init__(bootstrap, root, app_id, protocol)
        self.changelog = f"{app_id}-settings-changelog"
        self.latest_changelog = f"{app_id}-latest-changelog"
        #: Per worker name: history entries already counted (a restart starts a new history).
        self.seen: dict[str, int] = {}

    def start(self, name: str, env: dict[str, str] | None = None) -> WorkerProcess:
        worker: WorkerProcess = super().start(name, env)
        self.seen[name] = 0
        return worker

    def replayed(self, name: str) -> list[dict[str, dict[str, int]]]:
        """What ``name`` replayed at each rebalance since last asked: changelog -> partition ->
        records (its ``by_partition`` counts)."""
        history = self.view(name)["history"]
        entries = history[self.seen[name] :]
        self.seen[name] = len(history)
        return [e["by_partition"] for e in entries]

    def changelog_records(self) -> int:
        """Records in the global table's changelog (each setting once, or more: a setting
        processed again after a rebalance, as at-least-once allows, is written again)."""
        ends = asyncio.run(end_offsets(self.bootstrap, [self.changelog]))
        return sum(ends.values())

    def mark(self) -> None:
        for name in self.live():
            self.replayed(name)


def _total(replays: list[dict[str, dict[str, int]]], changelog: str) -> int:
    return sum(n for replay in replays for n in replay.get(changelog, {}).values())


@pytest.fixture(params=["eager", "cooperative"])
def group(
    request: pytest.FixtureRequest, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Group]:
    protocol = request.param
    app_id = f"it-global-{protocol}"
    create_topics(kafka_bootstrap, app_id)
    group = Group(kafka_bootstrap, tmp_path_factory.mktemp(app_id), app_id, protocol)
    try:
        for name in ("w1", "w2"):
            group.start(name)
        group.write_settings(SETTINGS)
        group.write_events(EVENTS)
        group.wait("two workers holding every setting and event")
        yield group
    finally:
        group.stop_all()


def test_rebalances_and_restarts_replay_only_the_global_tail(group: Group) -> None:
    group.mark()
    # Scale-out: w3 starts from nothing and reads the whole changelog, once (its recovery may be
    # cut short by the next rebalance: the records replayed still add up). w1 and w2 hold every
    # setting already and replay none.
    group.start("w3")
    group.wait("w3 to join and hold every setting")
    w3 = group.replayed("w3")
    assert _total(w3, group.changelog) == group.changelog_records() >= SETTINGS, w3
    for name in ("w1", "w2"):
        replays = group.replayed(name)
        assert replays, f"{name} went through no rebalance as w3 joined"
        assert _total(replays, group.changelog) == 0, (name, replays)

    # A clean restart of w1 while settings are written: the others replay nothing of the
    # global table at the rebalances it causes (they held every record as it was written),
    # and w1 replays only the settings written while it was away, and nothing of the table
    # whose changelog nobody wrote to meanwhile: its stores, active and standby, were
    # written and their offsets stored as it stopped.
    group.workers["w1"].stop()
    group.wait("w2 and w3 to cover for w1")
    held_by_w1 = group.changelog_records()
    group.write_settings(TAIL)
    group.wait("w2 and w3 to take the settings written while w1 is away")
    group.start("w1")
    group.wait("w1 back, holding every setting")
    w1 = group.replayed("w1")
    assert w1 and any(group.view("w1")["active"].get(group.latest_changelog)), w1
    written_meanwhile = group.changelog_records() - held_by_w1
    assert _total(w1, group.changelog) == written_meanwhile >= TAIL, w1
    assert _total(w1, group.latest_changelog) == 0, w1
    for name in ("w2", "w3"):
        replays = group.replayed(name)
        assert _total(replays, group.changelog) == 0, (name, replays)
