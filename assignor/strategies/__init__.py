"""The reference assignors of the seeds, as strategies of `assignor.plan`.

`REGISTRY` maps a strategy name to a function ``(Scenario, Grouping) -> result``
(the contract's result shape, built by `assignor.result.build_result`):

- ``range``, ``roundrobin``: Kafka's baselines (`classic`);
- ``fair``: KIP-49 (`fair`);
- ``sticky``: KIP-54 (`sticky`; `constrained` and `general` are its two paths);
- ``cooperative-sticky``: KIP-429 with KIP-615's constrained path (`sticky`);
- ``join-sticky``: KIP-315 (`join_sticky`).

Each core works on the small `problem.Problem` so it can be driven and
benchmarked without the scenario model; the scenario's own validation (stale
facts dropped, conflicting claims resolved by generation) happens before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from assignor.grouper import Grouping
from assignor.model import Scenario
from assignor.plan import Strategy
from assignor.result import build_result
from assignor.strategies.classic import assign_range, assign_roundrobin
from assignor.strategies.fair import assign_fair
from assignor.strategies.join_sticky import assign_join_sticky
from assignor.strategies.problem import Outcome, Problem, Subscription
from assignor.strategies.sticky import assign_cooperative_sticky, assign_sticky

__all__ = [
    "CORES",
    "REGISTRY",
    "Core",
    "Outcome",
    "Problem",
    "Subscription",
    "problem_from_scenario",
]

#: A strategy's core: the plain problem in, the outcome out (a `Strategy` wraps it).
Core = Callable[[Problem], Outcome]

#: strategy name -> core on the plain problem
CORES: dict[str, Core] = {
    "range": assign_range,
    "roundrobin": assign_roundrobin,
    "fair": assign_fair,
    "sticky": assign_sticky,
    "cooperative-sticky": assign_cooperative_sticky,
    "join-sticky": assign_join_sticky,
}


def problem_from_scenario(scenario: Scenario) -> Problem:
    """The facts the classic strategies use: subscriptions, generations, active claims."""
    return Problem(
        topics=scenario.topics,
        members={
            member_id: Subscription(
                subscription=frozenset(member.subscription),
                generation=member.generation,
                owned=member.owned_active,
            )
            for member_id, member in scenario.members.items()
        },
    )


def _strategy(name: str, core: Core) -> Strategy:
    def run(scenario: Scenario, grouping: Grouping) -> dict[str, Any]:
        outcome = core(problem_from_scenario(scenario))
        return build_result(
            name,
            scenario,
            grouping,
            active=outcome.assignment,
            revoking=outcome.revoking,
            followup_rebalance=outcome.followup_rebalance,
            stats=outcome.stats,
        )

    run.__name__ = f"plan_{name.replace('-', '_')}"
    run.__doc__ = core.__doc__
    return run


REGISTRY: dict[str, Strategy] = {name: _strategy(name, core) for name, core in CORES.items()}
