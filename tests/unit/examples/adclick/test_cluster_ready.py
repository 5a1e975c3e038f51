"""When the demo starts producing: every worker in the group, each with part of the join."""

from __future__ import annotations

from typing import Any

import pytest

from examples.adclick.cluster import wait_until_assigned
from examples.adclick.topology import Topology

TOPOLOGY = Topology(partitions=6)


class FakeWorker:
    """Answers /streamapp/assignment from a list of views, one per poll."""

    def __init__(self, name: str, views: list[dict[str, Any] | None]) -> None:
        self.name = name
        self.views = views
        self.polls = 0

    def alive(self) -> bool:
        return True

    def assignment(self) -> dict[str, Any] | None:
        view = self.views[min(self.polls, len(self.views) - 1)]
        self.polls += 1
        return view

    def log_tail(self) -> str:
        return ""


def _view(generation: int, partitions: list[int]) -> dict[str, Any]:
    return {"generation": generation, "active": {TOPOLOGY.impressions: partitions}}


def test_a_worker_still_joining_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("examples.adclick.cluster.time.sleep", lambda _s: None)
    # The first two polls: w2 answers but owns nothing (still joining); w1 and w3 own it all.
    w1 = FakeWorker("w1", [_view(2, [0, 1, 2]), _view(2, [0, 1, 2]), _view(3, [0, 1])])
    w2 = FakeWorker("w2", [_view(2, []), _view(2, []), _view(3, [2, 3])])
    w3 = FakeWorker("w3", [_view(2, [3, 4, 5]), _view(2, [3, 4, 5]), _view(3, [4, 5])])
    wait_until_assigned([w1, w2, w3], TOPOLOGY, timeout=60)  # type: ignore[list-item]
    assert w2.polls == 3


def test_views_of_two_generations_are_not_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("examples.adclick.cluster.time.sleep", lambda _s: None)
    w1 = FakeWorker("w1", [_view(2, [0, 1, 2, 3]), _view(3, [0, 1, 2])])
    w2 = FakeWorker("w2", [_view(3, [4, 5]), _view(3, [3, 4, 5])])
    wait_until_assigned([w1, w2], TOPOLOGY, timeout=60)  # type: ignore[list-item]
    assert w1.polls == 2


def test_more_workers_than_partitions_need_not_all_own_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("examples.adclick.cluster.time.sleep", lambda _s: None)
    small = Topology(partitions=2)
    views = [
        {"generation": 1, "active": {small.impressions: [0]}},
        {"generation": 1, "active": {small.impressions: [1]}},
        {"generation": 1, "active": {}},
    ]
    workers = [FakeWorker(f"w{i}", [v]) for i, v in enumerate(views)]
    wait_until_assigned(workers, small, timeout=60)  # type: ignore[arg-type]
    assert [w.polls for w in workers] == [1, 1, 1]
