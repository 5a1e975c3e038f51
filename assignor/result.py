"""Builds the contract's result object, so every strategy answers in one shape.

`build_result(strategy, scenario, grouping, active=..., standby=...,
warmup=..., revoking=..., followup_rebalance=..., stats=...) -> dict`

``active``/``standby``/``warmup``/``revoking`` map member id -> topic ->
partitions (any iterable, any order; members may be missing). The result has
every member of the scenario, partition lists sorted, empty topics omitted,
``unassigned`` computed as every partition active nowhere and not revoking,
and these ``stats`` (a strategy's own ``stats`` are added, but cannot override
them):

- ``moved_active``: tasks (group, partition) with a partition that some member
  claimed in ``owned_active`` and that is now active on a member with another
  ``client_id`` (or active nowhere). Claims come from current members, so the
  contract's "previous owner still a member" holds by construction.
- ``max_active_spread`` / ``max_standby_spread``: most minus fewest tasks held
  (active, resp. standby), over members eligible for any group (resp. any
  stateful group); ``max_group_active_spread``: the same within each group,
  worst group.
- ``standbys_missing``: per stateful task, ``min(num_standbys, eligible - 1)``
  minus the distinct members (other than its active) holding a standby of it.
- ``warmups``, ``stale_claims``, ``conflicting_claims``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from assignor.grouper import Grouping
from assignor.model import Scenario

__all__ = ["Placement", "build_result", "group_summaries"]

#: member id -> topic -> partitions
Placement = Mapping[str, Mapping[str, Iterable[int]]]


def _normalise(
    placement: Placement | None, members: Iterable[str]
) -> dict[str, dict[str, list[int]]]:
    placement = placement or {}
    out: dict[str, dict[str, list[int]]] = {}
    for member_id in members:
        by_topic = placement.get(member_id, {})
        sorted_topics = {t: sorted(set(ps)) for t, ps in sorted(by_topic.items())}
        out[member_id] = {t: ps for t, ps in sorted_topics.items() if ps}
    return out


def group_summaries(grouping: Grouping) -> list[dict[str, Any]]:
    """The result's ``groups`` list."""
    return [
        {"topics": list(g.topics), "partitions": g.partitions, "stateful": g.stateful}
        for g in grouping.groups
    ]


def _spread(counts: Iterable[int]) -> int:
    values = list(counts)
    return max(values) - min(values) if values else 0


def _tasks_held(
    placement: Mapping[str, Mapping[str, list[int]]], grouping: Grouping
) -> dict[str, set[tuple[int, int]]]:
    held: dict[str, set[tuple[int, int]]] = {}
    for member_id, by_topic in placement.items():
        tasks: set[tuple[int, int]] = set()
        for topic, partitions in by_topic.items():
            index = grouping.group_of_topic.get(topic)
            if index is not None:
                tasks.update((index, p) for p in partitions)
        held[member_id] = tasks
    return held


def _moved_active(
    scenario: Scenario, grouping: Grouping, active: Mapping[str, Mapping[str, list[int]]]
) -> int:
    owner_client: dict[tuple[str, int], str] = {}
    for member_id, by_topic in active.items():
        client = scenario.members[member_id].client_id
        for topic, partitions in by_topic.items():
            for partition in partitions:
                owner_client[(topic, partition)] = client
    moved: set[tuple[int, int]] = set()
    for member in scenario.members.values():
        for topic, owned in member.owned_active.items():
            index = grouping.group_of_topic.get(topic)
            for partition in owned:
                if owner_client.get((topic, partition)) != member.client_id:
                    moved.add((-1 if index is None else index, partition))
    return len(moved)


def _standbys_missing(
    scenario: Scenario,
    grouping: Grouping,
    active_tasks: Mapping[str, set[tuple[int, int]]],
    standby_tasks: Mapping[str, set[tuple[int, int]]],
) -> int:
    active_on: dict[tuple[int, int], set[str]] = {}
    for member_id, tasks in active_tasks.items():
        for task in tasks:
            active_on.setdefault(task, set()).add(member_id)
    copies: dict[tuple[int, int], int] = {}
    for member_id, tasks in standby_tasks.items():
        for task in tasks:
            if member_id not in active_on.get(task, ()):
                copies[task] = copies.get(task, 0) + 1
    missing = 0
    for group in grouping.groups:
        if not group.stateful:
            continue
        wanted = min(scenario.num_standbys, max(len(group.eligible) - 1, 0))
        for partition in range(group.partitions):
            missing += max(wanted - copies.get((group.index, partition), 0), 0)
    return missing


def build_result(
    strategy: str,
    scenario: Scenario,
    grouping: Grouping,
    *,
    active: Placement,
    standby: Placement | None = None,
    warmup: Placement | None = None,
    revoking: Placement | None = None,
    followup_rebalance: bool = False,
    stats: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The contract's result object for one strategy's decision (see module docs)."""
    ids = list(scenario.members)
    actives = _normalise(active, ids)
    standbys = _normalise(standby, ids)
    warmups = _normalise(warmup, ids)
    revokes = {m: ps for m, ps in _normalise(revoking, ids).items() if ps}

    placed: set[tuple[str, int]] = set()
    for by_topic in (*actives.values(), *revokes.values()):
        for topic, partitions in by_topic.items():
            placed.update((topic, p) for p in partitions)
    unassigned: dict[str, list[int]] = {}
    for topic, count in scenario.topics.items():
        missing = [p for p in range(count) if (topic, p) not in placed]
        if missing:
            unassigned[topic] = missing

    active_tasks = _tasks_held(actives, grouping)
    standby_tasks = _tasks_held(standbys, grouping)
    eligible_any = {m for g in grouping.groups for m in g.eligible}
    eligible_stateful = {m for g in grouping.groups if g.stateful for m in g.eligible}
    per_group: dict[tuple[str, int], int] = {}
    for member_id, tasks in active_tasks.items():
        for index, _partition in tasks:
            per_group[(member_id, index)] = per_group.get((member_id, index), 0) + 1
    group_spread = 0
    for group in grouping.groups:
        counts = (per_group.get((m, group.index), 0) for m in group.eligible)
        group_spread = max(group_spread, _spread(counts))

    computed: dict[str, Any] = {
        "moved_active": _moved_active(scenario, grouping, actives),
        "max_active_spread": _spread(len(active_tasks[m]) for m in ids if m in eligible_any),
        "max_group_active_spread": group_spread,
        "max_standby_spread": _spread(len(standby_tasks[m]) for m in ids if m in eligible_stateful),
        "standbys_missing": _standbys_missing(scenario, grouping, active_tasks, standby_tasks),
        "warmups": sum(len(tasks) for tasks in _tasks_held(warmups, grouping).values()),
        "stale_claims": scenario.stale_claims,
        "conflicting_claims": scenario.conflicting_claims,
    }
    merged = dict(stats or {})
    merged.update(computed)

    return {
        "strategy": strategy,
        "groups": group_summaries(grouping),
        "members": {
            m: {"active": actives[m], "standby": standbys[m], "warmup": warmups[m]} for m in ids
        },
        "unassigned": unassigned,
        "revoking": revokes,
        "followup_rebalance": bool(followup_rebalance),
        "stats": merged,
    }
