"""The default strategy, ``stateful``: balanced, sticky, state-aware.

`assign_stateful(scenario, grouping) -> dict` runs, in order:

1. `facts.TaskFacts`: previous owners, standbys and local-state lag per task;
2. `quotas.active_quotas`: how many tasks of each group each member holds;
3. `active_placement.place_actives`: which tasks, sticky first, then to
   caught-up members, holding a task back (KIP-441) where its target would
   have to replay more than ``acceptable_recovery_lag``;
4. warmups for the held-back tasks, at most ``max_warmup_replicas`` (in task
   order); a held-back task beyond that budget still stays where it is;
5. `standby_placement.place_standbys`: replicas for stateful tasks (a warmup
   target gets no standby of the same task, and is preferred for one when it
   got no warmup);
6. the cooperative protocol: a partition changing member is withheld and
   listed in ``revoking`` of the member that held it.

``followup_rebalance`` is true when a task was held back or a partition is
being revoked: the result is a step, and the group should rebalance again
once warmups caught up or revocations completed.
"""

from __future__ import annotations

from typing import Any

from assignor.active_placement import place_actives
from assignor.facts import Task, TaskFacts
from assignor.grouper import Grouping
from assignor.model import Scenario
from assignor.quotas import active_quotas
from assignor.result import build_result
from assignor.standby_placement import place_standbys

__all__ = ["assign_stateful"]

#: member id -> topic -> partitions
_Placement = dict[str, dict[str, list[int]]]


def _add(placement: _Placement, member: str, topics: tuple[str, ...], partition: int) -> None:
    by_topic = placement[member]
    for topic in topics:
        partitions = by_topic.get(topic)
        if partitions is None:
            by_topic[topic] = [partition]
        else:
            partitions.append(partition)


def _warmups(scenario: Scenario, withheld: dict[Task, int]) -> dict[Task, int]:
    """Warmup replicas for held-back tasks, in task order, at most max_warmup_replicas."""
    first = sorted(withheld)[: scenario.max_warmup_replicas]
    return {task: withheld[task] for task in first}


def _withhold_moving_partitions(
    scenario: Scenario, active: _Placement
) -> tuple[_Placement, dict[str, dict[str, list[int]]]]:
    """Cooperative protocol: nobody gets a partition its old member still holds."""
    owner_of: dict[tuple[str, int], str] = {}
    for member_id, by_topic in active.items():
        for topic, partitions in by_topic.items():
            for p in partitions:
                owner_of[(topic, p)] = member_id
    revoking: dict[str, dict[str, list[int]]] = {}
    taken_back: dict[str, dict[str, set[int]]] = {}
    for member_id, member in scenario.members.items():
        for topic, owned in member.owned_active.items():
            for p in owned:
                new_owner = owner_of.get((topic, p))
                if new_owner == member_id:
                    continue
                revoking.setdefault(member_id, {}).setdefault(topic, []).append(p)
                if new_owner is not None:
                    taken_back.setdefault(new_owner, {}).setdefault(topic, set()).add(p)
    for member_id, withheld in taken_back.items():
        for topic, gone in withheld.items():
            active[member_id][topic] = [p for p in active[member_id][topic] if p not in gone]
    return active, revoking


def assign_stateful(scenario: Scenario, grouping: Grouping) -> dict[str, Any]:
    """The ``stateful`` strategy's result for a parsed scenario (see module docs)."""
    groups = list(grouping.groups)
    facts = TaskFacts.collect(scenario, grouping)
    quotas = active_quotas(groups, facts)
    actives = place_actives(groups, quotas, facts)
    warmups = _warmups(scenario, actives.withheld)
    replicas = place_standbys(scenario, groups, actives.owner, facts, actives.withheld, warmups)
    standbys = replicas.standbys
    for task in replicas.warmups_as_standby:
        del warmups[task]

    names = facts.members
    active: _Placement = {m: {} for m in names}
    standby: _Placement = {m: {} for m in names}
    warmup: _Placement = {m: {} for m in names}
    for group in groups:
        for p, owner in enumerate(actives.owner[group.index]):
            if owner != -1:
                _add(active, names[owner], group.topics, p)
    for (g, p), holders in standbys.items():
        for m in holders:
            _add(standby, names[m], groups[g].changelog_topics, p)
    for (g, p), m in warmups.items():
        _add(warmup, names[m], groups[g].changelog_topics, p)

    revoking: dict[str, dict[str, list[int]]] = {}
    if scenario.protocol == "cooperative":
        active, revoking = _withhold_moving_partitions(scenario, active)

    return build_result(
        "stateful",
        scenario,
        grouping,
        active=active,
        standby=standby,
        warmup=warmup,
        revoking=revoking,
        followup_rebalance=bool(actives.withheld) or bool(revoking),
        stats={"held_back_for_warmup": len(actives.withheld)},
    )
