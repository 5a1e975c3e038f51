"""The integration tests' check that replicas caught up (tests/integration/replica_lag.py): a
lag counts only once the end it was measured against is the broker's end."""

from __future__ import annotations

from typing import Any

from tests.integration.replica_lag import unsettled_replicas

CHANGELOG = "app-counts-changelog"


def _view(lag: dict[str, int], ends: dict[str, int], standby: list[int]) -> dict[str, Any]:
    """The parts of a worker's ``/streamapp/assignment`` view the check reads."""
    return {
        "standby": {CHANGELOG: standby},
        "warmup": {},
        "replica_lag": {CHANGELOG: lag},
        "replica_ends": {CHANGELOG: ends},
    }


def test_a_lag_measured_before_the_events_reached_the_changelog_does_not_count() -> None:
    # The CI run's probe: the standby's lag read 0 against ends of 62 (its store at 62), the
    # changelog's end was 1243 by then.
    views = {"w2": _view({"1": 0}, {"1": 62}, standby=[1])}
    why = unsettled_replicas(views, {CHANGELOG: {1: 1243}})
    assert why == [f"w2: {CHANGELOG}[1] lag 0 measured against end 62, the broker's is 1243"]


def test_a_lag_measured_against_the_brokers_end_counts() -> None:
    views = {"w1": _view({"0": 0}, {"0": 2369}, [0]), "w2": _view({"1": 0}, {"1": 1243}, [1])}
    assert unsettled_replicas(views, {CHANGELOG: {0: 2369, 1: 1243}}) == []


def test_a_current_lag_above_the_allowed_one_is_behind() -> None:
    views = {"w2": _view({"1": 3}, {"1": 1243}, [1])}
    ends = {CHANGELOG: {1: 1243}}
    assert unsettled_replicas(views, ends) == [f"w2: {CHANGELOG}[1] 3 behind (end 1243, allowed 0)"]
    # Under exactly_once: the commit markers after the last record no replica is handed.
    assert unsettled_replicas(views, ends, allowed={CHANGELOG: {1: 3}}) == []
    assert unsettled_replicas(views, ends, allowed={CHANGELOG: {1: 2}}) != []


def test_a_replica_with_no_lag_measured_yet_is_not_caught_up() -> None:
    # Right after an assignment the worker has not measured its new replicas: no lag is not 0.
    views = {"w1": {**_view({}, {}, [0, 2]), "warmup": {CHANGELOG: [4]}}}
    assert unsettled_replicas(views, {CHANGELOG: {0: 10, 2: 10, 4: 10}}) == [
        f"w1: no lag measured yet for {CHANGELOG} [0, 2, 4]"
    ]


def test_a_lag_the_broker_gave_no_end_for_is_not_judged_caught_up() -> None:
    views = {"w1": _view({"0": 0}, {"0": 5}, [0])}
    assert unsettled_replicas(views, {}) == [
        f"w1: {CHANGELOG}[0] has no broker end to judge its lag by"
    ]
