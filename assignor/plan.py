"""`plan(scenario, strategy=...)`: the one decision function, and its strategy registry.

A strategy is a callable ``(Scenario, Grouping) -> dict`` returning the
contract's result object (build it with `assignor.result.build_result`). The
built-ins are ``stateful`` (the default: `assignor.stateful`) and ``faust``
(stock faust-streaming's assignor: `assignor.faust_baseline`); the classic
ones come from ``assignor.strategies.REGISTRY`` when that package provides it.
Built-ins are imported lazily, so importing `assignor` never imports faust.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from assignor.errors import ScenarioError
from assignor.grouper import Grouping, group_partitions
from assignor.model import Scenario, parse_scenario

__all__ = ["BUILTIN_STRATEGIES", "Strategy", "available_strategies", "plan", "resolve_strategy"]

Strategy = Callable[[Scenario, Grouping], dict[str, Any]]

#: name -> "module:function" of the strategies this package owns
BUILTIN_STRATEGIES: dict[str, str] = {
    "stateful": "assignor.stateful:assign_stateful",
    "faust": "assignor.faust_baseline:assign_faust",
}


def _classic_strategies() -> Mapping[str, Strategy]:
    try:
        module = importlib.import_module("assignor.strategies")
    except ImportError:
        return {}
    registry = getattr(module, "REGISTRY", None)
    return registry if isinstance(registry, Mapping) else {}


def available_strategies() -> list[str]:
    """Every strategy name `plan` accepts, sorted."""
    return sorted({*BUILTIN_STRATEGIES, *_classic_strategies()})


def resolve_strategy(name: str) -> Strategy:
    """The strategy callable for ``name``; `ScenarioError` when there is none."""
    target = BUILTIN_STRATEGIES.get(name)
    if target is not None:
        module_name, function = target.split(":")
        found: Strategy = getattr(importlib.import_module(module_name), function)
        return found
    classic = _classic_strategies().get(name)
    if classic is None:
        known = ", ".join(available_strategies())
        raise ScenarioError(f"strategy: unknown strategy {name!r}, expected one of: {known}")
    return classic


def plan(scenario: Mapping[str, Any] | Scenario, *, strategy: str = "stateful") -> dict[str, Any]:
    """Decide who holds what: validate ``scenario``, group it, run ``strategy``.

    Pure: no I/O, no clock, no randomness; equal scenarios give equal results.
    Raises `ScenarioError` for bad input or an unknown strategy.
    """
    decide = resolve_strategy(strategy)
    parsed = parse_scenario(scenario)
    return decide(parsed, group_partitions(parsed))
