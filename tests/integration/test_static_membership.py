"""Static membership (KIP-345): each worker joins under its client id as ``group.instance.id``.

Real `streamapp worker` processes on a real broker, with a 30 s session timeout (the app's), and
no clock in any assertion: what is checked is who held which partitions in which generation
(each worker's ``/streamapp/assignment`` history), who the broker counts as a member
(DescribeGroups), and the table, which must hold exactly the events produced.

- A worker killed with SIGKILL and restarted at once takes its own place back: it holds its old
  partitions again, and the survivor never held them meanwhile (no rebalance waited out the
  dead member's session; there was none at all).
- A worker stopped with SIGTERM leaves the group as it stops (aiokafka sends no LeaveGroup for a
  static member; streamapp sends one naming the instance): it is no member any more the moment
  its process has exited, and the other worker takes everything in a new generation.
- A worker run with ``--no-leave-group-on-stop``, stopped with SIGTERM and started again (a
  rolling restart's step): it stays a member while it is down, takes its own place back, and
  the survivor's generation never moves; the clean stop leaves it nothing to replay.
- Two workers given one client id (two data dirs): the broker lets the newer take the older's
  place and fences the older, which exits with one line, not a traceback or a rejoin loop.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from streamapp.ops.group_read import describe_group
from streamapp.ops.group_view import GroupView, read_group
from streamapp.testing.kafka_io import create_topic, produce
from streamapp.testing.worker import WorkerProcess

from .workers import merged_table, wait_for_workers

APP = "tests.integration.apps.static_members:app"
PARTITIONS = 4  # the app's
FENCED_LINE = "streamapp worker: fenced: another worker joined group"


class Group:
    """One test's workers, the app's group and topic, and the table they must yield."""

    def __init__(self, bootstrap: str, root: Path, app_id: str) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.app_id = app_id
        self.topic = f"{app_id}-events"
        self.workers: dict[str, WorkerProcess] = {}
        self.expected: dict[str, int] = {}
        self.produced = 0
        self.markers = 0

    def start(self, name: str, client_id: str | None = None, *extra: str) -> WorkerProcess:
        worker = WorkerProcess(
            APP, self.bootstrap, self.root / name, "--client-id", client_id or name, *extra
        )
        self.workers[name] = worker.start()
        return worker

    def view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.workers[name].get_json("/streamapp/assignment")
        return view

    def actives(self, name: str) -> set[int]:
        return set(self.view(name)["active"].get(self.topic, []))

    def live(self) -> dict[str, WorkerProcess]:
        return {n: w for n, w in self.workers.items() if w.process and w.process.poll() is None}

    def produce(self, count: int) -> None:
        seqs = range(self.produced, self.produced + count)
        self.expected.update({_key(seq): seq for seq in seqs})
        asyncio.run(produce(self.bootstrap, self.topic, seqs, _key))
        self.produced += count

    def send_markers(self) -> list[str]:
        """One record to every partition, sent last: once all are in the table, every partition
        has been processed up to its end, and a table that matches then is final."""
        self.markers += 1
        keys = [f"end-{self.markers}-{p}" for p in range(PARTITIONS)]
        asyncio.run(_send_to_each_partition(self.bootstrap, self.topic, keys, self.markers))
        self.expected.update(dict.fromkeys(keys, self.markers))
        return keys

    def table(self) -> dict[str, int]:
        return merged_table(self.live().values(), "/latest/")

    def settled(self, names: set[str]) -> bool:
        """Every partition active exactly once among ``names``, each in its current generation."""
        held: list[int] = []
        for name in names:
            v = self.view(name)
            if not v["history"] or v["history"][-1]["generation"] != v["generation"]:
                return False  # the current assignment has not resumed processing yet
            if v["followup_pending"]:
                return False
            held.extend(v["active"].get(self.topic, []))
        return sorted(held) == list(range(PARTITIONS))

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 180.0) -> None:
        wait_for_workers(self.live(), what, check, timeout=timeout, details=self.summary)

    def wait_exact(self) -> None:
        """Send markers, wait for them, then the table must be exactly what was produced."""
        keys = self.send_markers()
        self.wait("every partition processed up to its marker", lambda: _has(self.table(), keys))
        assert self.table() == self.expected, self.summary()

    def describe(self) -> GroupView:
        """The group decoded: only while it is stable (the broker sends no member metadata or
        assignment in the middle of a rebalance)."""
        return read_group(asyncio.run(describe_group(self.bootstrap, self.app_id)))

    def member_ids(self) -> set[str]:
        """The broker's members, in whatever state the group is."""
        described = asyncio.run(describe_group(self.bootstrap, self.app_id))
        return {member.member_id for member in described.members}

    def members(self) -> dict[str, set[int]]:
        """client id -> the partitions of the app's topic the broker's group gives it."""
        return {
            m.client_id: set(m.assignment.active.get(self.topic, []) if m.assignment else [])
            for m in self.describe().members
        }

    def summary(self) -> str:
        lines = []
        for name in self.live():
            try:
                v = self.view(name)
            except OSError as exc:
                lines.append(f"{name}: no view ({exc})")
                continue
            lines.append(
                f"{name}: generation {v['generation']} active {v['active'].get(self.topic)} "
                f"history {[(e['generation'], e['active'].get(self.topic)) for e in v['history']]}"
            )
        return "\n".join(lines)

    def stop_all(self) -> None:
        for worker in self.live().values():
            worker.stop()


def _key(seq: int) -> str:
    return f"k{seq}"  # unique: a lost record is a key missing from the table


def _has(table: dict[str, int], keys: list[str]) -> bool:
    return all(key in table for key in keys)


async def _send_to_each_partition(bootstrap: str, topic: str, keys: list[str], value: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for partition, key in enumerate(keys):
            await producer.send(topic, str(value).encode(), key=key.encode(), partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


@pytest.fixture
def make_group(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], Group]]:
    groups: list[Group] = []

    def make(app_id: str) -> Group:
        monkeypatch.setenv("STATIC_APP_ID", app_id)  # read by the workers' app module
        asyncio.run(create_topic(kafka_bootstrap, f"{app_id}-events", PARTITIONS))
        group = Group(kafka_bootstrap, tmp_path, app_id)
        groups.append(group)
        return group

    try:
        yield make
    finally:
        for group in groups:
            group.stop_all()


def _two_workers(group: Group, *extra: str) -> None:
    group.start("w1", None, *extra)
    group.start("w2", None, *extra)
    group.wait(
        "two workers sharing the partitions",
        lambda: group.settled({"w1", "w2"}) and bool(group.actives("w1")),
    )
    group.produce(200)
    group.wait_exact()


def test_a_worker_killed_and_restarted_at_once_takes_its_own_place_back(
    make_group: Callable[[str], Group],
) -> None:
    group = make_group("it-static-kill")
    _two_workers(group)
    assert group.members() == {"w1": group.actives("w1"), "w2": group.actives("w2")}
    victim_partitions = group.actives("w2")
    survivor_before = group.view("w1")
    member_before = {m.client_id: m.member_id for m in group.describe().members}

    group.workers["w2"].stop(signal.SIGKILL)
    group.produce(200)  # to every partition, the victim's too, while it is away
    group.start("w2")  # at once, on its data dir: the same client id, so the same instance id
    group.wait(
        "the restarted worker processing its partitions",
        lambda: group.settled({"w1", "w2"}) and group.actives("w2") == victim_partitions,
    )
    group.wait_exact()

    # The broker's group: w2 under a new member id (a new process), with its old partitions.
    members = {m.client_id: m for m in group.describe().members}
    assert set(members) == {"w1", "w2"}
    assert members["w2"].member_id != member_before["w2"]
    assert members["w1"].member_id == member_before["w1"]
    assert group.members()["w2"] == victim_partitions

    # The survivor never held the dead worker's partitions: the restart took the place back
    # with no rebalance at all, so the survivor's generation has not moved.
    survivor = group.view("w1")
    since = survivor["history"][len(survivor_before["history"]) :]
    assert since == [], group.summary()
    assert survivor["generation"] == survivor_before["generation"], group.summary()
    assert group.actives("w1") == set(range(PARTITIONS)) - victim_partitions
    # The restarted worker's first assignment is its own old share, in that same generation.
    restarted = group.view("w2")["history"]
    assert restarted[0]["generation"] == survivor_before["generation"], group.summary()
    assert set(restarted[0]["active"][group.topic]) == victim_partitions


def test_a_worker_stopped_with_sigterm_leaves_the_group_at_once(
    make_group: Callable[[str], Group],
) -> None:
    group = make_group("it-static-stop")
    _two_workers(group)
    generation_before = group.view("w1")["generation"]
    member = {m.client_id: m.member_id for m in group.describe().members}

    assert group.workers["w2"].stop(signal.SIGTERM) == 0, group.workers["w2"].log_tail()
    # Its LeaveGroup was answered before its process exited: the broker no longer counts it,
    # 30 s of session timeout notwithstanding (the group may be rebalancing now: raw ids).
    assert group.member_ids() == {member["w1"]}
    assert "static member w2 left the group" in group.workers["w2"].log_path.read_text()

    group.produce(200)
    group.wait("w1 holding every partition", lambda: group.settled({"w1"}))
    survivor = group.view("w1")
    assert survivor["generation"] > generation_before
    assert set(survivor["history"][-1]["active"][group.topic]) == set(range(PARTITIONS))
    group.wait_exact()
    assert group.members() == {"w1": set(range(PARTITIONS))}


def test_without_leave_group_on_stop_a_stop_and_start_causes_no_rebalance(
    make_group: Callable[[str], Group],
) -> None:
    group = make_group("it-static-stay")
    _two_workers(group, "--no-leave-group-on-stop")
    victim_partitions = group.actives("w2")
    survivor_before = group.view("w1")
    member_before = {m.client_id: m.member_id for m in group.describe().members}

    assert group.workers["w2"].stop(signal.SIGTERM) == 0, group.workers["w2"].log_tail()
    log = group.workers["w2"].log_path.read_text()
    assert "static member w2 stopped without leaving the group" in log
    assert "left the group" not in log
    # Still a member for the broker: its session (30 s) has not timed out.
    assert group.member_ids() == set(member_before.values())

    group.produce(200)  # to every partition, the stopped worker's too, while it is away
    group.start("w2", None, "--no-leave-group-on-stop")
    group.wait(
        "the restarted worker processing its partitions",
        lambda: group.settled({"w1", "w2"}) and group.actives("w2") == victim_partitions,
    )
    group.wait_exact()

    # No rebalance at all: the survivor's generation and history did not move.
    survivor = group.view("w1")
    assert survivor["history"][len(survivor_before["history"]) :] == [], group.summary()
    assert survivor["generation"] == survivor_before["generation"], group.summary()
    restarted = group.view("w2")
    assert restarted["history"][0]["generation"] == survivor_before["generation"]
    assert set(restarted["history"][0]["active"][group.topic]) == victim_partitions
    # It stopped cleanly and nobody wrote its changelogs meanwhile: nothing to replay.
    assert restarted["recovery"]["records_replayed_total"] == 0, restarted["recovery"]


def test_two_workers_with_one_client_id_the_older_is_fenced_and_exits_with_one_line(
    make_group: Callable[[str], Group],
) -> None:
    group = make_group("it-static-dup")
    first = group.start("first", client_id="twin")
    group.wait("the first worker holding every partition", lambda: group.settled({"first"}))
    group.produce(100)
    group.wait_exact()

    # Another data dir, the same client id: the same group.instance.id.
    second = group.start("second", client_id="twin")
    assert first.process is not None
    status = first.process.wait(timeout=180)
    log = first.log_path.read_text()
    assert status == 3, first.log_tail()
    assert log.count(FENCED_LINE) == 1, first.log_tail()
    assert "Traceback" not in log, first.log_tail()
    assert "left the group" not in log  # its place is the other worker's: no LeaveGroup

    # The newer worker carries on alone with every partition, and nothing is lost.
    group.wait("the second worker holding every partition", lambda: group.settled({"second"}))
    group.produce(100)
    group.wait_exact()
    assert set(group.members()) == {"twin"}
    assert second.process is not None and second.process.poll() is None
    assert FENCED_LINE not in second.log_path.read_text()
