"""Three (then four) real `streamapp worker` processes on a real broker, through a crash, a rolling
restart and a scale-out, with a changelog-backed rocksdict table.

The tests run in order and share the workers (module fixture): each phase starts from the state
the previous one left. What is checked comes from each worker's ``/streamapp/assignment`` view
(what it holds, and per rebalance the changelog records its recovery replayed) and from the
table's contents (``/latest/``, each worker's active partitions).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamapp.testing.kafka_io import create_topic, partition_ends, produce
from streamapp.testing.worker import WorkerProcess

from .replica_lag import replicas_behind
from .workers import merged_table, start_stock_faust_worker, wait_for_workers

APP = "tests.integration.apps.rebalance:app"
STOCK_APP = "tests.integration.apps.stock_faust:app"
#: What the broker tells a stock-Faust worker, whose only protocol ("faust") is not ours.
STOCK_REFUSED = "InconsistentGroupProtocolError"
TOPIC = "it-rebalance-events"
PARTITIONS = 6  # the app's default
CHANGELOG = "it-rebalance-latest-changelog"
ACCEPTABLE_LAG = 300
KEYS = 3000
#: ~1500 changelog records per partition: a full replay is five times the acceptable lag.
INITIAL_EVENTS = 9000
#: Written while a worker is away: ~50 records per partition, well within the acceptable lag.
TAIL_EVENTS = 300
ENV = {"REBALANCE_ACCEPTABLE_LAG": str(ACCEPTABLE_LAG), "REBALANCE_PROBING_S": "5"}


class Group:
    """The workers of the test, the events produced so far, and the table they must yield."""

    def __init__(self, bootstrap: str, root: Path) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.workers: dict[str, WorkerProcess] = {}
        self.expected: dict[str, int] = {}
        self.produced = 0

    def start(self, name: str) -> WorkerProcess:
        worker = WorkerProcess(APP, self.bootstrap, self.root / name, "--client-id", name)
        self.workers[name] = worker.start()
        return worker

    def view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.workers[name].get_json("/streamapp/assignment")
        return view

    def produce(self, count: int) -> None:
        for seq in range(self.produced, self.produced + count):
            self.expected[_key(seq)] = seq
        asyncio.run(
            produce(self.bootstrap, TOPIC, range(self.produced, self.produced + count), _key)
        )
        self.produced += count

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 90.0) -> None:
        wait_for_workers(
            self.workers, what, check, timeout=timeout, details=self.summary, log_lines=15
        )

    def summary(self) -> str:
        lines = []
        for name in self.workers:
            try:
                v = self.view(name)
            except OSError as exc:
                lines.append(f"{name}: no view ({exc})")
                continue
            last = v["history"][-1] if v["history"] else {}
            lines.append(
                f"{name}: gen {v['plan_generation']} (resumed {last.get('plan_generation')}) "
                f"active {v['active'].get(TOPIC)} standby {v['standby'].get(CHANGELOG)} "
                f"warmup {v['warmup'].get(CHANGELOG)} lag {v['replica_lag'].get(CHANGELOG)} "
                f"(ends {v['replica_ends'].get(CHANGELOG)}) followup {v['followup_pending']}"
            )
        return "\n".join(lines)

    def actives(self) -> dict[str, set[int]]:
        return {name: set(self.view(name)["active"].get(TOPIC, [])) for name in self.workers}

    def settled(self) -> bool:
        """Every event partition active exactly once, processing, the table exact, and every
        replica caught up with its changelog's end."""
        views = {name: self.view(name) for name in self.workers}
        held = [p for v in views.values() for p in v["active"].get(TOPIC, [])]
        if sorted(held) != list(range(PARTITIONS)):
            return False
        for v in views.values():
            if v["followup_pending"] or not v["history"]:
                return False
            if v["history"][-1]["plan_generation"] != v["plan_generation"]:
                return False  # the current assignment has not resumed processing yet
        # Replicas last: their lags are judged against the changelog's ends once every event
        # is in the table (a lag measured before the events reached the changelog is stale).
        return self.table_matches() and not replicas_behind(self.bootstrap, views)

    def table(self) -> dict[str, int]:
        return merged_table(self.workers.values(), "/latest/")

    def table_matches(self) -> bool:
        return self.table() == self.expected


def _key(seq: int) -> str:
    return f"k{seq % KEYS}"


def _replayed(entry: dict[str, Any]) -> dict[int, int]:
    return {int(p): n for p, n in entry["by_partition"].get(CHANGELOG, {}).items()}


@pytest.fixture(scope="module")
def group(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    env = pytest.MonkeyPatch()
    for name, value in ENV.items():
        env.setenv(name, value)  # read by the worker subprocesses' app module
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    group = Group(kafka_bootstrap, tmp_path_factory.mktemp("rebalance"))
    try:
        for name in ("w1", "w2", "w3"):
            group.start(name)
        group.wait(
            "three workers sharing the work",
            lambda: len([n for n, ps in group.actives().items() if ps]) == 3,
            timeout=120,
        )
        group.produce(INITIAL_EVENTS)
        group.wait("the initial events processed and replicated", group.settled, timeout=120)
        yield group
    finally:
        for worker in group.workers.values():
            if worker.process is not None and worker.process.poll() is None:
                worker.stop()
        env.undo()


def test_assignment_view_is_the_contract_shape(group: Group) -> None:
    """``GET /streamapp/assignment`` as contracts/cli.md writes it, with real values."""
    views = {name: group.view(name) for name in group.workers}
    members = set()
    for name, v in views.items():
        assert v["client_id"] == name
        assert isinstance(v["member_id"], str) and v["member_id"]
        members.add(v["member_id"])
        assert isinstance(v["generation"], int) and v["generation"] > 0
        assert isinstance(v["host"], str) and v["host"]
        assert v["rack"] is None
        assert v["active"][TOPIC] and v["active"][CHANGELOG] == v["active"][TOPIC]
        assert set(v["standby"]) <= {CHANGELOG} and v["warmup"] == {}
        recovery = v["recovery"]
        last = recovery["last_rebalance"]
        assert isinstance(last["records_replayed"], int) and last["records_replayed"] >= 0
        assert isinstance(last["seconds_to_resume"], float) and last["seconds_to_resume"] >= 0
        assert recovery["records_replayed_total"] >= last["records_replayed"]
        assert isinstance(v["rebalances"], int) and v["rebalances"] >= 1
    assert len(members) == len(views)
    # Generations agree: one plan is in force.
    assert len({v["generation"] for v in views.values()}) == 1


def test_crash_promotes_standbys_with_at_most_the_acceptable_lag(group: Group) -> None:
    views = {name: group.view(name) for name in group.workers}
    victim = "w3"
    lost = set(views[victim]["active"][TOPIC])
    standby_of = {
        p: name
        for name, v in views.items()
        if name != victim
        for p in v["standby"].get(CHANGELOG, [])
    }
    assert lost and lost <= set(standby_of), f"every lost task had a standby: {views}"
    before_crash = max(v["generation"] for v in views.values())
    group.workers[victim].stop(signal.SIGKILL)
    del group.workers[victim]
    group.wait("the survivors to take over", group.settled)
    since = {
        name: [e for e in group.view(name)["history"] if e["generation"] > before_crash]
        for name in group.workers
    }
    for p in lost:
        # The first plan without the victim hands its tasks to their standbys; a follow-up
        # (KIP-441) may then move one to a member it had warmed up meanwhile.
        heir = standby_of[p]
        takeover = since[heir][0]
        assert p in takeover["active"][TOPIC], f"partition {p} not on its standby {heir}: {since}"
    for name, entries in since.items():
        for entry in entries:
            assert max(_replayed(entry).values(), default=0) <= ACCEPTABLE_LAG, (name, entry)

    # The crashed worker comes back on its data dir; the tail it missed is small.
    group.produce(TAIL_EVENTS)
    group.start(victim)
    group.wait(
        "the crashed worker back in the group",
        lambda: group.settled() and bool(group.actives()[victim]),
    )
    assert group.table_matches()


def test_rolling_restart_gives_each_its_own_tasks_replaying_only_the_tail(group: Group) -> None:
    before = group.actives()
    for name in sorted(group.workers):
        ends_before = asyncio.run(partition_ends(group.bootstrap, CHANGELOG))
        assert group.workers[name].stop() == 0, group.workers[name].log_tail()
        away = group.workers.pop(name)
        group.wait(f"the others to cover for {name}", group.settled)
        group.produce(TAIL_EVENTS)
        group.wait(f"the tail processed while {name} is away", group.table_matches)
        ends_after = asyncio.run(partition_ends(group.bootstrap, CHANGELOG))
        group.start(name)
        assert group.workers[name].data_dir == away.data_dir
        group.wait(
            f"{name} back with exactly its own tasks",
            lambda name=name: (
                group.settled()  # type: ignore[misc]
                and group.actives()[name] == before[name]
            ),
        )
        entries = [e for e in group.view(name)["history"] if e["active"].get(TOPIC)]
        # Its own tasks from the first assignment that gave it any, not after a detour.
        assert set(entries[0]["active"][TOPIC]) == before[name], (name, entries)
        replayed = _replayed(entries[-1])
        assert set(replayed) == set(entries[-1]["active"][CHANGELOG])
        for p, records in replayed.items():
            tail = ends_after[p] - ends_before[p]
            assert records <= tail, (name, p, replayed, tail)


def test_scale_out_warms_up_first_and_never_replays_a_full_changelog(group: Group) -> None:
    group.produce(TAIL_EVENTS)
    group.start("w4")
    group.wait(
        "w4 to take its share", lambda: group.settled() and bool(group.actives()["w4"]), timeout=120
    )
    history = group.view("w4")["history"]
    warmed = [e for e in history if e["warmup"].get(CHANGELOG) and not e["active"].get(TOPIC)]
    assert warmed, f"w4 never got warmups before actives: {history}"
    promoted = set(group.actives()["w4"])
    warmed_up = {p for e in history for p in e["warmup"].get(CHANGELOG, [])}
    assert promoted <= warmed_up, (promoted, history)
    for name in group.workers:
        for entry in group.view(name)["history"]:
            worst = max(_replayed(entry).values(), default=0)
            assert worst <= ACCEPTABLE_LAG, (name, entry)


def test_stock_faust_worker_is_refused_and_the_group_carries_on(group: Group) -> None:
    before = group.actives()
    log_path = group.root / "stock-faust.log"
    stock = start_stock_faust_worker(
        STOCK_APP, group.bootstrap, group.root / "stock-faust", log_path
    )
    try:
        # Refused by the broker at JoinGroup: it never gets into the group.
        deadline = time.monotonic() + 90
        while STOCK_REFUSED not in log_path.read_text(errors="replace"):
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-3000:]
            assert stock.poll() is None, log_path.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
    finally:
        stock.kill()
        stock.wait()
    group.wait("the group to settle without the stock worker", group.settled)
    assert group.actives() == before
    for name in group.workers:
        assert max(_replayed(group.view(name)["history"][-1]).values(), default=0) == 0


def test_table_contents_are_exactly_right(group: Group) -> None:
    group.produce(TAIL_EVENTS)
    group.wait("the last events processed", group.settled)
    table = group.table()
    assert len(table) == KEYS
    assert table == group.expected
