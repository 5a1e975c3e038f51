"""streamapp's assignment decisions: pure, synchronous, no I/O.

Public API:

- `plan(scenario, *, strategy="stateful") -> dict`: docs/assignment-rules.md.
- `parse_scenario(mapping) -> Scenario` (`assignor.scenario_parser`; the types, `assignor.model`).
- `ScenarioError`: bad input, message names the field.
- `PartitionGrouper`, `group_partitions` (`assignor.grouper`).
- `build_result` (`assignor.result`): the result shape every strategy returns.
"""

from assignor.errors import ScenarioError
from assignor.grouper import Group, Grouping, PartitionGrouper, group_partitions
from assignor.model import Member, Scenario
from assignor.plan import available_strategies, plan
from assignor.result import build_result
from assignor.scenario_parser import parse_scenario

__all__ = [
    "Group",
    "Grouping",
    "Member",
    "PartitionGrouper",
    "Scenario",
    "ScenarioError",
    "available_strategies",
    "build_result",
    "group_partitions",
    "parse_scenario",
    "plan",
]
