"""bench/rebalance.py's app: its ticks share a task with the events they stand in for."""

from __future__ import annotations


def test_ticks_are_co_partitioned_with_the_events() -> None:
    from bench.apps import rebalance_app
    from tests.integration.apps import rebalance

    # Same partition count and same subscriber: partition p of both is one task, so a tick
    # stops exactly when that task's events stop.
    assert rebalance_app.ticks.partitions == rebalance.events.partitions
    agents = {agent.name.rsplit(".", 1)[-1]: agent for agent in rebalance_app.app.agents.values()}
    assert {"keep_latest", "note_ticks"} <= set(agents)
