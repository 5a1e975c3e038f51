"""A stray member in a streamapp group: two real workers on a real broker, then a plain
aiokafka consumer joins their group under the ``streamapp`` protocol (tests/integration/apps/
rogue_member.py), in turn with metadata that does not decode, with metadata that lies about
everything it can (generation 10**6, every partition owned, offsets 10**9), and with metadata
whose only lie is its offsets.

The leader trusts only what it can check: the first two get no partitions at all, the third no
event partition once found out (only a warmup it never replays); the real workers keep every
event counted exactly; the group settles (no follow-up rebalances for ever); and the leader's
log names each stray member once per fault.

The tests run in order and share the workers (module fixture).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from standby.runtime import OFFSET_REPORT_GRACE_S
from streamapp.testing.kafka_io import create_topic, produce
from streamapp.testing.worker import REPO_ROOT, WorkerProcess
from tests.integration.apps.rogue_counter import (
    APP_ID,
    CHANGELOG,
    LEADER_TOPIC,
    PARTITIONS,
    TOPIC,
)

from .workers import merged_table

APP = "tests.integration.apps.rogue_counter:app"
#: As many keys as the first events: each partition's changelog then holds about 100 records,
#: far above the app's acceptable recovery lag, however a worker batches a key's writes.
KEYS = 400
#: How long the group's Kafka generation must stay put to count as settled: longer than the
#: app's probing interval (5 s) and the follow-up scheduler's minimum gap, several times over.
STABLE_S = 20.0


class RogueMember:
    """`tests.integration.apps.rogue_member` in a subprocess, and what it printed."""

    def __init__(self, bootstrap: str, mode: str, log_path: Path) -> None:
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.integration.apps.rogue_member",
                    bootstrap,
                    APP_ID,
                    mode,
                    f"{TOPIC}={PARTITIONS}",
                    f"{CHANGELOG}={PARTITIONS}",
                    f"{LEADER_TOPIC}=1",
                ],
                cwd=REPO_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def assignments(self) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["event"] == "assigned"]

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(
                f"rogue member exited with {self.process.returncode}:\n"
                + self.log_path.read_text(errors="replace")[-3000:]
            )
        leader = [e for e in self.events() if e["event"] == "leader"]
        assert not leader, f"the broker made the rogue member the group's leader: {leader}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # it leaves the group
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Group:
    """The two workers, the events produced so far, and the counts they must yield."""

    def __init__(self, bootstrap: str, root: Path) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.workers: dict[str, WorkerProcess] = {}
        self.expected: Counter[str] = Counter()
        self.produced = 0

    def start(self, name: str) -> None:
        worker = WorkerProcess(APP, self.bootstrap, self.root / name, "--client-id", name)
        self.workers[name] = worker.start()

    def view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.workers[name].get_json("/streamapp/assignment")
        return view

    def wait(self, what: str, check: Callable[[], bool], timeout: float, *extra: Any) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, worker in self.workers.items():
                assert worker.process is not None
                if worker.process.poll() is not None:
                    raise AssertionError(f"{name} exited:\n{worker.log_tail()}")
            for rogue in extra:
                rogue.check_alive()
            try:
                if check():
                    return
            except OSError:
                pass  # a web view not up yet, or busy in a rebalance
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.state()}")

    def state(self) -> str:
        lines = []
        for name, worker in self.workers.items():
            try:
                v = self.view(name)
                lines.append(
                    f"{name}: generation {v['generation']} active {v['active'].get(TOPIC)} "
                    f"warmup {v['warmup']} followup {v['followup_pending']}"
                )
            except OSError as exc:
                lines.append(f"{name}: no view ({exc})")
            lines.append(worker.log_tail(12))
        return "\n".join(lines)

    def actives(self) -> list[int]:
        return sorted(p for name in self.workers for p in self.view(name)["active"].get(TOPIC, []))

    def produce(self, count: int) -> None:
        keys = [f"k{seq % KEYS}" for seq in range(self.produced, self.produced + count)]
        self.expected.update(keys)
        asyncio.run(
            produce(
                self.bootstrap,
                TOPIC,
                range(self.produced, self.produced + count),
                lambda seq: f"k{seq % KEYS}",
            )
        )
        self.produced += count

    def counts(self) -> dict[str, int]:
        return merged_table(self.workers.values(), "/counts/")

    def counted_exactly(self) -> bool:
        return self.actives() == list(range(PARTITIONS)) and self.counts() == dict(self.expected)

    def generations(self) -> dict[str, int | None]:
        return {name: self.view(name)["generation"] for name in self.workers}

    def wait_settled(self, *rogues: RogueMember, timeout: float = 120.0) -> dict[str, int | None]:
        """Until the group's generation has not changed for STABLE_S: no rebalance loop."""
        seen: dict[str, Any] = {"generations": None, "since": time.monotonic()}

        def stable() -> bool:
            now = self.generations()
            if now != seen["generations"] or None in now.values():
                seen.update(generations=now, since=time.monotonic())
                return False
            return time.monotonic() - seen["since"] >= STABLE_S

        self.wait(f"a generation that holds for {STABLE_S:.0f} s", stable, timeout, *rogues)
        settled: dict[str, int | None] = seen["generations"]
        return settled

    def warnings(self, *words: str) -> dict[str, list[str]]:
        """Per worker, its log's warning lines holding every one of ``words``."""
        found = {}
        for name, worker in self.workers.items():
            text = worker.log_path.read_text(errors="replace")
            found[name] = [
                line
                for line in text.splitlines()
                if "WARNING" in line and all(w in line for w in words)
            ]
        return found

    def only_in_leader_log(self, *words: str) -> str:
        """The one warning line holding ``words``: once, in one worker's log, a leader's."""
        found = self.warnings(*words)
        lines = [(name, line) for name, ls in found.items() for line in ls]
        assert len(lines) == 1, found
        name, line = lines[0]
        assert "planned generation" in self.workers[name].log_path.read_text(errors="replace")
        return line


@pytest.fixture(scope="module")
def group(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    group = Group(kafka_bootstrap, tmp_path_factory.mktemp("rogue"))
    try:
        group.start("w1")
        group.wait("w1 holding every partition", lambda: group.actives() == [0, 1, 2, 3], 180)
        group.start("w2")
        group.wait(
            "both workers holding partitions",
            lambda: all(group.view(n)["active"].get(TOPIC) for n in group.workers),
            180,
        )
        # Counting is not idempotent: produce only into a settled group, whose rebalances are
        # over (Faust is at-least-once across a rebalance).
        group.wait_settled()
        group.produce(400)
        group.wait("the first events counted", group.counted_exactly, 120)
        group.wait_settled()
        yield group
    finally:
        for worker in group.workers.values():
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()


def _stopped(rogue: RogueMember) -> Iterator[RogueMember]:
    try:
        yield rogue
    finally:
        rogue.stop()


@pytest.fixture
def garbage_member(group: Group, tmp_path: Path) -> Iterator[RogueMember]:
    yield from _stopped(RogueMember(group.bootstrap, "garbage", tmp_path / "rogue.log"))


@pytest.fixture
def lying_member(group: Group, tmp_path: Path) -> Iterator[RogueMember]:
    yield from _stopped(RogueMember(group.bootstrap, "liar", tmp_path / "rogue.log"))


@pytest.fixture
def offsets_member(group: Group, tmp_path: Path) -> Iterator[RogueMember]:
    yield from _stopped(RogueMember(group.bootstrap, "offsets", tmp_path / "rogue.log"))


def test_a_member_whose_metadata_does_not_decode_gets_nothing(
    group: Group, garbage_member: RogueMember
) -> None:
    rogue = garbage_member
    group.wait("the stray member's first assignment", lambda: bool(rogue.assignments()), 90, rogue)
    member_id = rogue.assignments()[0]["member_id"]
    assert isinstance(member_id, str) and member_id.startswith("rogue-garbage-")
    group.wait_settled(rogue)
    # It got nothing, in every rebalance it was in; the workers hold every partition.
    assert [a["partitions"] for a in rogue.assignments()] == [[]] * len(rogue.assignments())
    assert group.actives() == [0, 1, 2, 3]

    group.produce(300)
    group.wait("the events produced with the stray member in the group", group.counted_exactly, 90)
    assert rogue.assignments()[-1]["partitions"] == []

    warned = group.only_in_leader_log(f"member {member_id} sent metadata streamapp cannot read")
    assert "given no partitions" in warned


def test_a_member_whose_metadata_lies_gets_nothing(group: Group, lying_member: RogueMember) -> None:
    rogue = lying_member
    group.wait("the stray member's first assignment", lambda: bool(rogue.assignments()), 90, rogue)
    member_id = rogue.assignments()[0]["member_id"]
    assert isinstance(member_id, str) and member_id.startswith("rogue-liar-")
    group.wait_settled(rogue)
    # On main it took every active task and the workers were parked on warmups for ever.
    assert [a["partitions"] for a in rogue.assignments()] == [[]] * len(rogue.assignments())
    assert group.actives() == [0, 1, 2, 3]
    for name in group.workers:
        assert group.view(name)["warmup"] == {}

    group.produce(300)
    group.wait("the events produced with the stray member in the group", group.counted_exactly, 90)
    assert rogue.assignments()[-1]["partitions"] == []

    line = group.only_in_leader_log(f"member {member_id} (client rogue) claims partitions")
    assert "at generation 1000000, above any this group has had" in line
    assert f"changelog offsets the broker does not have ({CHANGELOG}[0] at 1000000000" in line
    assert "given no partitions" in line


def log_time(line: str) -> float:
    """The wall-clock time of a worker's log line (``[2026-11-29 04:48:29,989] ...``)."""
    stamp = line[1 : line.index("]")]
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_a_member_whose_offsets_lie_is_found_out_and_the_group_settles(
    group: Group, offsets_member: RogueMember
) -> None:
    """Offsets alone could be an honest active's, written since the leader last read the ends:
    it is planned as caught up until the broker's ends, read again past the grace period, are
    still below. Then its state does not count: it holds no active task, only warmups it never
    replays, and the workers stop asking for follow-up rebalances after a few."""
    rogue = offsets_member
    group.wait("the stray member's first assignment", lambda: bool(rogue.assignments()), 90, rogue)
    member_id = rogue.assignments()[0]["member_id"]
    assert isinstance(member_id, str) and member_id.startswith("rogue-offsets-")
    group.wait(
        "the leader to find the stray member out",
        lambda: any(group.warnings(member_id, "broker does not have").values()),
        OFFSET_REPORT_GRACE_S + 60,
        rogue,
    )
    found = [
        ln for lines in group.warnings(member_id, "broker does not have").values() for ln in lines
    ]
    found_at = min(log_time(line) for line in found)
    group.wait_settled(rogue, timeout=180)
    # From the plan that found it out (the leader warns as it plans) on: not one event partition.
    # Its assignment can reach the stray member before this test reads the warning.
    later = [a for a in rogue.assignments() if a["at"] > found_at]
    assert later, "no assignment after the stray member was found out"
    assert all(t != TOPIC for a in later for t, _ in a["partitions"]), later
    assert group.actives() == [0, 1, 2, 3]

    group.produce(300)
    group.wait("the events produced with the stray member in the group", group.counted_exactly, 90)

    line = group.only_in_leader_log(f"member {member_id} (client rogue) reports changelog")
    assert f"{CHANGELOG}[0] at 1000000000" in line and "does not count" in line
    # It holds a warmup (a changelog partition) that it never replays; each worker asked for
    # the follow-up rebalance three times, then said once that it stopped.
    assert any(t == CHANGELOG for t, _ in later[-1]["partitions"]), later[-1]
    stalled = group.warnings("no more follow-up rebalances: 3 asked in a row")
    assert all(len(lines) == 1 for lines in stalled.values()), stalled
    assert all("warmup(s) of the group are on other workers" in ls[0] for ls in stalled.values())
    for name in group.workers:
        assert group.view(name)["followup_pending"] is False


def test_the_group_carries_on_after_the_stray_members_leave(group: Group) -> None:
    group.wait_settled()
    assert group.actives() == [0, 1, 2, 3]
    for name in group.workers:
        view = group.view(name)
        assert view["warmup"] == {} and view["followup_pending"] is False
    group.produce(200)
    group.wait("the last events counted", group.counted_exactly, 90)
