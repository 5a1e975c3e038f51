"""`streamapp group` against a live group of three real workers on a real broker.

What the command decodes from the broker alone (DescribeGroups, end offsets) must be what each
worker says it holds in its own ``/streamapp/assignment`` view; the what-if must move exactly
the leaving worker's tasks.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from streamapp.testing.kafka_io import create_topic, produce
from streamapp.testing.worker import REPO_ROOT, WorkerProcess
from tests.paths import artifact

from .workers import wait_for_workers

APP = "tests.integration.apps.rebalance:app"
APP_ID = "it-group"
TOPIC = f"{APP_ID}-events"
CHANGELOG = f"{APP_ID}-latest-changelog"
PARTITIONS = 6
ENV = {"REBALANCE_APP_ID": APP_ID, "REBALANCE_ACCEPTABLE_LAG": "300", "REBALANCE_PROBING_S": "5"}
WORKERS = {
    "worker-1": ("host-1", "rack-a"),
    "worker-2": ("host-2", "rack-a"),
    "worker-10": ("host-10", "rack-b"),
}


def _group_command(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamapp", "group", APP_ID, "--broker", bootstrap, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.fixture(scope="module")
def workers(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, WorkerProcess]]:
    env = pytest.MonkeyPatch()
    for name, value in ENV.items():
        env.setenv(name, value)  # read by the worker subprocesses' app module
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    asyncio.run(produce(kafka_bootstrap, TOPIC, range(600), lambda seq: f"k{seq % 97}"))
    root = tmp_path_factory.mktemp("group")
    started: dict[str, WorkerProcess] = {}
    try:
        for client, (host, rack) in WORKERS.items():
            worker = WorkerProcess(
                APP,
                kafka_bootstrap,
                root / client,
                *("--client-id", client, "--host", host, "--rack", rack),
            )
            started[client] = worker.start()
        yield started
    finally:
        for worker in started.values():
            worker.stop()
        env.undo()


def _views(workers: dict[str, WorkerProcess]) -> dict[str, dict[str, Any]]:
    return {name: w.get_json("/streamapp/assignment") for name, w in workers.items()}


def _holdings(workers: dict[str, WorkerProcess]) -> dict[str, dict[str, Any]]:
    """What each worker holds, and under which plan (lag and history move all the time)."""
    keys = ("member_id", "plan_generation", "active", "standby", "warmup")
    return {name: {k: v[k] for k in keys} for name, v in _views(workers).items()}


def _settled(workers: dict[str, WorkerProcess]) -> bool:
    """One plan everywhere, every partition active once, no follow-up to come."""
    views = _views(workers)
    generations = {v["plan_generation"] for v in views.values()}
    held = sorted(p for v in views.values() for p in v["active"].get(TOPIC, []))
    return (
        len(generations) == 1
        and None not in generations
        and held == list(range(PARTITIONS))
        and not any(v["followup_pending"] or v["warmup"] for v in views.values())
    )


def _matches(out: dict[str, Any], views: dict[str, dict[str, Any]]) -> bool:
    """The command's members are the workers, holding what each worker says it holds."""
    by_client = {m["client_id"]: m for m in out["members"]}
    if set(by_client) != set(views):
        return False
    for client, view in views.items():
        member = by_client[client]
        if member["member_id"] != view["member_id"]:
            return False
        if out["generation"] != view["plan_generation"]:
            return False
        # The view's actives come from Faust and include its leader topic, as the assignment does.
        for key in ("active", "standby", "warmup"):
            if member[key] != view[key]:
                return False
    return True


def test_group_shows_what_every_worker_holds(
    kafka_bootstrap: str, workers: dict[str, WorkerProcess]
) -> None:
    wait_for_workers(workers, "one settled plan", lambda: _settled(workers), timeout=240)
    last: dict[str, Any] = {}

    def command_agrees() -> bool:
        # The group may still move between the command and the views: read both until they
        # agree on one generation (the views before and after the command being equal).
        nonlocal last
        before = _holdings(workers)
        done = _group_command(kafka_bootstrap, "--format", "json")
        assert done.returncode == 0, done.stderr
        last = json.loads(done.stdout)
        return before == _holdings(workers) and _matches(last, before)

    wait_for_workers(workers, "the command to agree with the views", command_agrees, timeout=120)
    assert last["group"] == APP_ID
    assert last["protocol"] == "streamapp"
    assert last["state"] == "Stable"
    assert [m["client_id"] for m in last["members"]] == ["worker-1", "worker-2", "worker-10"]
    for member in last["members"]:
        host, rack = WORKERS[member["client_id"]]
        assert (member["host"], member["rack"], member["capacity"]) == (host, rack, 1)
        replicas = {
            p for part in (member["standby"], member["warmup"]) for p in part.get(CHANGELOG, [])
        }
        # Every replica has a lag, from the broker's end offsets.
        assert {int(p) for p in member["lag"].get(CHANGELOG, {})} == replicas
        assert all(n >= 0 for n in member["lag"].get(CHANGELOG, {}).values())
    # One standby per table partition (the app's default), never with its active.
    standbys = sorted(p for m in last["members"] for p in m["standby"].get(CHANGELOG, []))
    assert standbys == list(range(PARTITIONS))

    table = _group_command(kafka_bootstrap)
    assert table.returncode == 0, table.stderr
    text = table.stdout
    assert text.splitlines()[0].startswith(f"group {APP_ID}: Stable, protocol streamapp")
    assert text.index("\nworker-1 ") < text.index("\nworker-2 ") < text.index("\nworker-10 ")
    assert "rack rack-b" in text
    artifact("group-table.txt").write_text(text, encoding="utf-8")


def test_what_if_leave_moves_the_leavers_actives_only(
    kafka_bootstrap: str, workers: dict[str, WorkerProcess]
) -> None:
    wait_for_workers(workers, "one settled plan", lambda: _settled(workers), timeout=240)
    found: dict[str, Any] = {}

    def stable_answer() -> bool:
        nonlocal found
        before = _holdings(workers)
        done = _group_command(
            kafka_bootstrap,
            "--format",
            "json",
            "--what-if",
            "leave worker-2",
            "--acceptable-recovery-lag",
            "300",
        )
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        return before == _holdings(workers) and _matches(found, before)

    wait_for_workers(workers, "a what-if on one plan", stable_answer, timeout=120)
    leaving = next(m for m in found["members"] if m["client_id"] == "worker-2")
    what_if = found["what_if"]
    assert what_if["change"] == "leave worker-2"
    assert what_if["settings"]["acceptable_recovery_lag"] == 300
    moved = {(m["topic"], m["partition"]) for m in what_if["moves"] if m["kind"] == "active"}
    # Exactly worker-2's actives move (stickiness), nothing lands on it.
    held = {(t, p) for t, ps in leaving["active"].items() for p in ps}
    assert moved == held
    assert all(m["to"] in {"worker-1", "worker-10"} for m in what_if["moves"])
    assert what_if["records_replayed_before_resume"] >= 0

    table = _group_command(kafka_bootstrap, "--what-if", "add 1")
    assert table.returncode == 0, table.stderr
    assert "what if: add 1 (planned with num_standby_replicas 1" in table.stdout
    assert "new-1" in table.stdout


def test_refusals_are_one_line_and_exit_2(
    kafka_bootstrap: str, workers: dict[str, WorkerProcess]
) -> None:
    for args, message in (
        (("--what-if", "leave nobody"), "no member of group 'it-group' has that client id"),
        (("--what-if", "shrink"), "expected 'leave CLIENT_ID' or 'add N'"),
    ):
        done = _group_command(kafka_bootstrap, *args)
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr
    unknown = subprocess.run(
        [sys.executable, "-m", "streamapp", "group", "no-such-app", "--broker", kafka_bootstrap],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        "streamapp group: consumer group 'no-such-app' does not exist on this broker"
    ]
