"""`plan(scenario, strategy=...)`: the one decision function, and its strategy registry.

A strategy is a callable ``(Scenario, Grouping) -> dict`` returning the
contract's result object (build it with `assignor.result.build_result`). The
built-ins are ``stateful`` (the default: `assignor.stateful`) and ``faust``
(stock faust-streaming's assignor: `assignor.faust_baseline`); the classic
ones are ``assignor.strategies.REGISTRY``. All are imported lazily, so
importing `assignor` never imports faust (and `assignor.strategies`, which
imports `Strategy` from here, is imported after this module).
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from assignor.errors import ScenarioError
from assignor.grouper import Grouping, group_partitions
from assignor.model import Scenario
from assignor.scenario_parser import parse_scenario

__all__ = ["BUILTIN_STRATEGIES", "Strategy", "available_strategies", "plan", "resolve_strategy"]

#: A strategy: a parsed scenario and its grouping in, the contract's result out.
#: (The classic strategies wrap a `assignor.strategies.Core` on a plain problem.)
Strategy = Callable[[Scenario, Grouping], dict[str, Any]]

#: name -> "module:function" of the strategies this package owns
BUILTIN_STRATEGIES: dict[str, str] = {
    "stateful": "assignor.stateful:assign_stateful",
    "faust": "assignor.faust_baseline:assign_faust",
}


def _classic_strategies() -> Mapping[str, Strategy]:
    from assignor.strategies import REGISTRY  # lazily: it imports this module

    return REGISTRY


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
    with _collector_paused():
        parsed = parse_scenario(scenario)
        return decide(parsed, group_partitions(parsed))


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for one decision, whatever the strategy.

    A decision allocates a few hundred thousand short-lived containers at
    10,000 tasks (scenario model, per-task facts, result lists), none in a
    reference cycle, so reference counting frees them all. Yet every 700
    allocations the collector runs, and every so often it traverses every
    live object of the process: the caller's scenario, earlier results, a
    worker's tables. In bench/plan_scale.py that was 30-60 ms of an 80-110 ms
    plan after a member leaves. Re-enabled only if it was on and this call
    turned it off, so nested or concurrent calls never leave it off.
    """
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
