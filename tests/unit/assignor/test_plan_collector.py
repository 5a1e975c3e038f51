"""`plan` pauses the cyclic garbage collector for one decision and restores it."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from assignor import ScenarioError, plan

SCENARIO: dict[str, Any] = {
    "topics": {"t": 4},
    "members": {"a": {"subscription": ["t"]}, "b": {"subscription": ["t"]}},
}


@pytest.mark.parametrize("strategy", ["stateful", "faust"])
def test_the_collector_is_on_again_after_a_plan_and_after_bad_input(strategy: str) -> None:
    assert gc.isenabled()
    assert plan(SCENARIO, strategy=strategy)["stats"]["max_active_spread"] == 0
    assert gc.isenabled()
    with pytest.raises(ScenarioError):
        plan({"topics": {}}, strategy=strategy)
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    try:
        plan(SCENARIO)
        assert not gc.isenabled()
    finally:
        gc.enable()
