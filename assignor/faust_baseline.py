"""The ``faust`` strategy: stock faust-streaming's assignment, as the baseline.

It runs faust's own `CopartitionedAssignor` once per co-partition group with
``replicas=num_standbys``, fed with each eligible member's previous
`ClientAssignment`, exactly as ``faust/assignor/partition_assignor.py``
(`PartitionAssignor._perform_assignment`) drives it. Two differences, both so
that every strategy answers the same scenario: the groups are our
`PartitionGrouper`'s (faust's own rule, same partition count and same
subscribers, plus declared groups), and members are visited in member-id
order (faust visits them in the order the broker lists them).

Faust knows nothing of capacities, hosts, racks, local offsets or warmups, and
never asks for a follow-up rebalance. It places standbys for every group; only
those of changelog topics are reported, as they are the only ones faust
replays. This is the only module that imports faust.
"""

from __future__ import annotations

from typing import Any

from faust.assignor.client_assignment import ClientAssignment, CopartitionedAssignment
from faust.assignor.copartitioned_assignor import CopartitionedAssignor

from assignor.grouper import Grouping
from assignor.model import Scenario
from assignor.result import build_result

__all__ = ["assign_faust"]


def _previous(scenario: Scenario) -> dict[str, ClientAssignment]:
    return {
        member_id: ClientAssignment(
            actives={t: list(ps) for t, ps in member.owned_active.items()},
            standbys={t: list(ps) for t, ps in member.owned_standby.items()},
        )
        for member_id, member in scenario.members.items()
    }


def assign_faust(scenario: Scenario, grouping: Grouping) -> dict[str, Any]:
    """Faust's result for a parsed scenario (see module docs)."""
    previous = _previous(scenario)
    active: dict[str, dict[str, list[int]]] = {m: {} for m in scenario.members}
    standby: dict[str, dict[str, list[int]]] = {m: {} for m in scenario.members}
    for group in grouping.groups:
        if not group.eligible:
            continue
        topics = set(group.topics)
        cluster: dict[str, CopartitionedAssignment] = {
            member_id: previous[member_id].copartitioned_assignment(topics)
            for member_id in group.eligible
        }
        assignor = CopartitionedAssignor(
            topics=topics,
            cluster_asgn=cluster,
            num_partitions=group.partitions,
            replicas=scenario.num_standbys,
        )
        for member_id, assignment in assignor.get_assignment().items():
            for topic in group.topics:
                active[member_id][topic] = sorted(assignment.actives)
            for topic in group.changelog_topics:
                standby[member_id][topic] = sorted(assignment.standbys)
    return build_result("faust", scenario, grouping, active=active, standby=standby)
