"""A rolling upgrade from eager to cooperative (KIP-429) on a real broker, while records flow.

Three `streamapp worker` processes of tests/integration/apps/cooperative.py start with
``--rebalance-protocol eager`` (as a group of an older streamapp, eager by default, runs); each
is then stopped (SIGTERM) and started again on its data dir with no protocol given, one at a
time, while a producer keeps sending to every partition: the upgrade an operator makes onto a
streamapp whose default is cooperative. Checked from each worker process's own log of when it
starts and stops processing each partition, and from each worker's assignment history
(``/streamapp/assignment``):

- nothing is lost, and the table is exact;
- no partition is ever processed by two worker processes at once;
- every plan made while an eager worker was in the group told the group to stay eager, and no
  worker kept its partitions through a rebalance until then; once the last worker was upgraded
  the group runs cooperative, and its workers keep their partitions through rebalances.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamapp.testing.kafka_io import create_topic

from .cooperative_group import WorkerGroup, check_nothing_lost, check_one_owner_at_a_time, read_log
from .workers import wait_for_workers

APP = "tests.integration.apps.cooperative:app"
APP_ID = "it-coop-upgrade"
TOPIC = f"{APP_ID}-events"
PARTITIONS = 6  # the app's
KEYS = 600
NAMES = ("w1", "w2", "w3")
#: What a worker logs when it keeps its partitions through a join (streamapp.private_names).
KEPT_LINE = "cooperative rebalance of group"


class Group(WorkerGroup):
    """The workers (one process per start), what they were sent, and what they must yield."""

    def __init__(self, bootstrap: str, root: Path) -> None:
        super().__init__(APP, bootstrap, root, TOPIC, _key)
        #: (name, start number) -> that process's processing log
        self.logs: dict[tuple[str, int], Path] = {}
        self.stopped: set[tuple[str, int]] = set()
        self.starts: dict[str, int] = {}
        self._lock = threading.Lock()

    def start(self, name: str, protocol: str | None) -> None:
        """Start ``name`` again under ``protocol`` (None: streamapp's default)."""
        start = self.starts.get(name, 0)
        self.starts[name] = start + 1
        log_dir = self.root / "processing" / f"{name}-{start}"
        log_dir.mkdir(parents=True)
        self.logs[(name, start)] = log_dir / f"{name}.jsonl"
        env = {"COOP_LOG_DIR": str(log_dir), "COOP_APP_ID": APP_ID}
        self.start_worker(name, env=env, protocol=protocol, name=name)

    def stop(self, name: str) -> None:
        assert self.workers[name].stop() == 0, self.workers[name].log_tail()
        self.stopped.add((name, self.starts[name] - 1))

    def produce(self, count: int) -> None:
        with self._lock:
            super().produce(count)

    def settled(self) -> bool:
        """Every partition active exactly once, every worker processing its current plan."""
        return self.assignment_settled(self.workers, PARTITIONS)

    def wait(self, what: str, check: Any, timeout: float = 180.0) -> None:
        wait_for_workers(self.workers, what, check, timeout=timeout, log_lines=30)

    def entries(self, key: tuple[str, int]) -> list[dict[str, Any]]:
        path = self.logs[key]
        if not path.exists():
            return []
        return read_log(path)

    def worker_logs(self) -> str:
        return "".join(w.log_path.read_text(errors="replace") for w in self.workers.values())


class Producer:
    """Sends batches to every partition from a thread until stopped: records flow throughout."""

    def __init__(self, group: Group) -> None:
        self.group = group
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self.done.is_set():
                self.group.produce(60)
                self.done.wait(0.2)  # a steady stream, not a flood
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def __enter__(self) -> Producer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()
        assert self.error is None, self.error


def _key(seq: int) -> str:
    return f"k{seq % KEYS}"


def _protocols(histories: list[list[dict[str, Any]]]) -> set[tuple[int, str]]:
    return {(e["plan_generation"], e["group_protocol"]) for h in histories for e in h}


@pytest.fixture
def group(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Group]:
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    with Group(kafka_bootstrap, tmp_path) as group:
        yield group


def test_a_rolling_upgrade_from_eager_to_cooperative_keeps_every_record_and_one_owner(
    group: Group,
) -> None:
    for name in NAMES:
        group.start(name, "eager")
    group.produce(3000)
    group.wait("three eager workers processing the first events", group.settled)

    seen_histories: list[list[dict[str, Any]]] = []
    with Producer(group):
        for name in NAMES:
            if name == NAMES[-1]:
                # The last eager worker is still in the group: every plan so far, on every
                # worker, told the group to stay eager, and no worker kept its partitions
                # through a rebalance.
                before_last = [v["history"] for v in group.views().values()] + seen_histories
                planned = _protocols(before_last)
                assert {protocol for _, protocol in planned} == {"eager"}, planned
                assert KEPT_LINE not in group.worker_logs()
                last_eager_plan = max(g for g, _ in planned)
            seen_histories.append(group.view(name)["history"])
            group.stop(name)
            group.start(name, None)  # the default: cooperative
            group.wait(f"{name} back, upgraded, with the group settled", group.settled)

        # Every member speaks cooperative now: the group runs it, and plans after the last
        # eager worker's last plan say so.
        def cooperative() -> bool:
            views = group.views()
            return group.settled() and all(
                v["history"][-1]["group_protocol"] == "cooperative" for v in views.values()
            )

        group.wait("the group running cooperative", cooperative)
        after = _protocols([v["history"] for v in group.views().values()])
        assert all(g > last_eager_plan for g, p in after if p == "cooperative"), after
        # ... and the rebalance the last worker rejoined in was one the others kept their
        # partitions through.
        assert KEPT_LINE in group.worker_logs()

    group.wait("every event processed", lambda: group.settled() and group.table() == group.expected)

    logs = {key: group.entries(key) for key in group.logs}
    # No partition processed by two worker processes at once; every record a process handled
    # lies in one of its own spans of that partition.
    check_one_owner_at_a_time(logs, PARTITIONS, ended=group.stopped)

    # Nothing lost: every offset processed at least once, and the table exact.
    check_nothing_lost(group, logs.values())
