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


#: member id -> group index -> partitions (a task is one partition of a group)
_HeldTasks = dict[str, dict[int, set[int]]]


def _tasks_held(placement: Mapping[str, Mapping[str, list[int]]], grouping: Grouping) -> _HeldTasks:
    """Per member, the tasks it holds, as partition numbers per group.

    Plain int sets per group rather than one (group, partition) tuple per
    task: the same answers, far fewer objects at a million partitions.
    """
    group_of_topic = grouping.group_of_topic
    held: _HeldTasks = {}
    for member_id, by_topic in placement.items():
        tasks: dict[int, set[int]] = {}
        for topic, partitions in by_topic.items():
            index = group_of_topic.get(topic)
            if index is None:
                continue
            found = tasks.get(index)
            if found is None:
                tasks[index] = set(partitions)
            else:
                found.update(partitions)
        held[member_id] = tasks
    return held


def _task_count(tasks: dict[int, set[int]]) -> int:
    return sum(map(len, tasks.values()))


def _moved_active(
    scenario: Scenario, grouping: Grouping, active: Mapping[str, Mapping[str, list[int]]]
) -> int:
    # topic -> partition -> client now holding it; the last member (in id
    # order) wins, as every strategy places a partition once anyway.
    owner_client: dict[str, dict[int, str]] = {}
    for member_id, by_topic in active.items():
        client = scenario.members[member_id].client_id
        for topic, partitions in by_topic.items():
            owner_client.setdefault(topic, {}).update(dict.fromkeys(partitions, client))
    # group index (-1: a topic in no group) -> moved partitions
    moved: dict[int, set[int]] = {}
    nobody: dict[int, str] = {}
    for member in scenario.members.values():
        client = member.client_id
        for topic, owned in member.owned_active.items():
            holders = owner_client.get(topic, nobody)
            gone = [p for p in owned if holders.get(p) != client]
            if gone:
                index = grouping.group_of_topic.get(topic)
                moved.setdefault(-1 if index is None else index, set()).update(gone)
    return sum(map(len, moved.values()))


def _standbys_missing(
    scenario: Scenario,
    grouping: Grouping,
    active_tasks: _HeldTasks,
    standby_tasks: _HeldTasks,
) -> int:
    wanted = {
        group.index: min(scenario.num_standbys, max(len(group.eligible) - 1, 0))
        for group in grouping.groups
        if group.stateful
    }
    wanted = {index: k for index, k in wanted.items() if k > 0}
    if not wanted:  # nothing wanted: nothing can be missing
        return 0
    # group index -> partition -> standby copies not on a member holding it active
    copies = {index: [0] * grouping.groups[index].partitions for index in wanted}
    for member_id, tasks in standby_tasks.items():
        mine = active_tasks.get(member_id, {})
        for index, partitions in tasks.items():
            counts = copies.get(index)
            if counts is None:
                continue
            for p in partitions.difference(mine.get(index, ())):
                if 0 <= p < len(counts):
                    counts[p] += 1
    missing = 0
    for index, k in wanted.items():
        missing += sum(k - c for c in copies[index] if c < k)
    return missing


def _unassigned(
    scenario: Scenario,
    actives: Mapping[str, Mapping[str, list[int]]],
    revokes: Mapping[str, Mapping[str, list[int]]],
) -> dict[str, list[int]]:
    """Per topic, the partitions active nowhere and not being revoked."""
    placed: dict[str, set[int]] = {}
    for by_topic in (*actives.values(), *revokes.values()):
        for topic, partitions in by_topic.items():
            placed.setdefault(topic, set()).update(partitions)
    unassigned: dict[str, list[int]] = {}
    for topic, count in scenario.topics.items():
        taken = placed.get(topic, set())
        # The common case, every partition placed, checked without a loop in Python.
        if len(taken) == count and min(taken) >= 0 and max(taken) < count:
            continue
        missing = sorted(set(range(count)).difference(taken))
        if missing:
            unassigned[topic] = missing
    return unassigned


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

    unassigned = _unassigned(scenario, actives, revokes)

    active_tasks = _tasks_held(actives, grouping)
    standby_tasks = _tasks_held(standbys, grouping)
    eligible_any = {m for g in grouping.groups for m in g.eligible}
    eligible_stateful = {m for g in grouping.groups if g.stateful for m in g.eligible}
    group_spread = 0
    for group in grouping.groups:
        counts = (len(active_tasks[m].get(group.index, ())) for m in group.eligible)
        group_spread = max(group_spread, _spread(counts))

    computed: dict[str, Any] = {
        "moved_active": _moved_active(scenario, grouping, actives),
        "max_active_spread": _spread(
            _task_count(active_tasks[m]) for m in ids if m in eligible_any
        ),
        "max_group_active_spread": group_spread,
        "max_standby_spread": _spread(
            _task_count(standby_tasks[m]) for m in ids if m in eligible_stateful
        ),
        "standbys_missing": _standbys_missing(scenario, grouping, active_tasks, standby_tasks),
        "warmups": sum(map(_task_count, _tasks_held(warmups, grouping).values())),
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
