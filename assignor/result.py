"""The contract's result object, so every strategy answers in one shape.

Two ways in, one way out:

- `build_result(strategy, scenario, grouping, active=..., standby=...,
  warmup=..., revoking=..., followup_rebalance=..., stats=...) -> dict`, for
  any strategy: ``active``/``standby``/``warmup``/``revoking`` map member id ->
  topic -> partitions (any iterable, any order; members may be missing);
- `build_task_result(scenario, grouping, decision, ...) -> dict`, for the
  ``stateful`` strategy's eager decision (`Decision`: per group, who holds each
  task): it skips the round trip through member id -> topic -> partitions maps
  that `build_result` must take, which would sort and deduplicate every list,
  then rebuild per-member task sets to count them. Each member's partitions of
  a group come from `runs.runs_by_member` (one stable sort of the owner array,
  in C); counts for the spreads are the lengths of those runs; the standby
  shortfall is that of each task's standby list.
  tests/unit/assignor/test_task_result.py checks that both answer the same.

Both present their placement to one `_unassigned`, one `_moved_active` and one
`_finish` (the ``stats`` and the object) as holder arrays: per topic, the member
index holding each partition active (-1: nobody).

The result has every member of the scenario, partition lists sorted, empty
topics omitted, ``unassigned`` as every partition active nowhere and not
revoking, ``incoming`` (cooperative, only when not empty: member id -> topic ->
partitions planned for that member but withheld this round, as their old member
revokes them), and these ``stats`` (a strategy's own ``stats`` are added, but cannot
override them):

- ``moved_active``: tasks (group, partition) with a partition that some member
  claimed in ``owned_active`` and that is now active on a member with another
  ``client_id`` (or active nowhere); topics in no group count under group -1.
  Claims come from current members, so the contract's "previous owner still a
  member" holds by construction.
- ``max_active_spread`` / ``max_standby_spread``: most minus fewest tasks held
  (active, resp. standby), over members eligible for any group (resp. any
  stateful group); ``max_group_active_spread``: the same within each group,
  worst group.
- ``standbys_missing``: per stateful task, `rules.wanted_standbys` minus the
  distinct members (other than its active) holding a standby of it.
- ``warmups``, ``stale_claims``, ``conflicting_claims``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from assignor.facts import Task
from assignor.grouper import Grouping
from assignor.model import Scenario
from assignor.rules import wanted_standbys
from assignor.runs import runs_by_member

__all__ = ["Decision", "Placement", "build_result", "build_task_result", "group_summaries"]

#: member id -> topic -> partitions
Placement = Mapping[str, Mapping[str, Iterable[int]]]
#: topic -> per partition, the member index holding it active (-1: nobody);
#: a topic with no entry is held by nobody at all
_Holders = Mapping[str, Sequence[int]]


def group_summaries(grouping: Grouping) -> list[dict[str, Any]]:
    """The result's ``groups`` list."""
    return [
        {"topics": list(g.topics), "partitions": g.partitions, "stateful": g.stateful}
        for g in grouping.groups
    ]


# --------------------------------------------------------------------------- shared


def _spread(values: Iterable[int]) -> int:
    counts = list(values)
    return max(counts) - min(counts) if counts else 0


def _unassigned(
    scenario: Scenario, holders_of: _Holders, revoking: Mapping[str, Mapping[str, list[int]]]
) -> dict[str, list[int]]:
    """Per topic, the partitions active nowhere and not being revoked."""
    revoked: dict[str, set[int]] = {}
    for by_topic in revoking.values():
        for topic, partitions in by_topic.items():
            revoked.setdefault(topic, set()).update(partitions)
    unassigned: dict[str, list[int]] = {}
    for topic, count in scenario.topics.items():
        holders = holders_of.get(topic)
        if holders is None:
            free = list(range(count))
        elif -1 not in holders:  # the common case, every partition placed, checked in C
            continue
        else:
            free = [p for p, m in enumerate(holders) if m == -1]
        gone = revoked.get(topic)
        if gone:
            free = [p for p in free if p not in gone]
        if free:
            unassigned[topic] = free
    return unassigned


def _moved_active(
    scenario: Scenario, grouping: Grouping, holders_of: _Holders, *, whole_tasks: bool
) -> int:
    """Tasks with a claimed partition now active on another client (or nowhere).

    ``whole_tasks``: every topic of a group is placed with its partition's
    task, so a member's claims on several topics of one group that list the
    same partitions are checked once.
    """
    # Clients as small ints; the extra last entry answers holder -1 (nobody)
    # through Python's index -1, with a number no member's client has.
    number: dict[str, int] = {}
    client = [number.setdefault(m.client_id, len(number)) for m in scenario.members.values()]
    client.append(-1)
    # group index (-1: a topic in no group) -> moved partitions
    moved: dict[int, set[int]] = {}
    for i, member in enumerate(scenario.members.values()):
        me = client[i]
        # group -> partitions checked (whole tasks only)
        checked: dict[int, tuple[int, ...]] = {}
        for topic, owned in member.owned_active.items():
            g = grouping.group_of_topic.get(topic)
            index = -1 if g is None else g
            holders = holders_of.get(topic)
            if holders is None:
                moved.setdefault(index, set()).update(owned)
                continue
            if whole_tasks and g is not None:
                if checked.get(g) == owned:
                    continue
                checked[g] = owned
            # The common case, every claim still with its client, in C.
            now = set(map(client.__getitem__, map(holders.__getitem__, owned)))
            if now == {me} or not owned:
                continue
            gone = [p for p in owned if client[holders[p]] != me]
            moved.setdefault(index, set()).update(gone)
    return sum(map(len, moved.values()))


def _finish(
    strategy: str,
    scenario: Scenario,
    grouping: Grouping,
    *,
    members: dict[str, dict[str, Any]],
    holders_of: _Holders,
    whole_tasks: bool,
    revoking: dict[str, dict[str, list[int]]],
    followup_rebalance: bool,
    stats: Mapping[str, Any] | None,
    incoming: dict[str, dict[str, list[int]]] | None = None,
    active_count: Sequence[int],
    standby_count: Sequence[int],
    group_counts: Iterable[Iterable[int]],
    standbys_missing: int,
    warmups: int,
) -> dict[str, Any]:
    """The result object, given per member index its active and standby task counts
    and per group its eligible members' active counts."""
    index_of = {m: i for i, m in enumerate(scenario.members)}
    groups = grouping.groups
    eligible_any = sorted({index_of[m] for g in groups for m in g.eligible})
    eligible_stateful = sorted({index_of[m] for g in groups if g.stateful for m in g.eligible})
    computed: dict[str, Any] = {
        "moved_active": _moved_active(scenario, grouping, holders_of, whole_tasks=whole_tasks),
        "max_active_spread": _spread([active_count[m] for m in eligible_any]),
        "max_group_active_spread": max(map(_spread, group_counts), default=0),
        "max_standby_spread": _spread([standby_count[m] for m in eligible_stateful]),
        "standbys_missing": standbys_missing,
        "warmups": warmups,
        "stale_claims": scenario.stale_claims,
        "conflicting_claims": scenario.conflicting_claims,
    }
    merged = dict(stats or {})
    merged.update(computed)
    result: dict[str, Any] = {
        "strategy": strategy,
        "groups": group_summaries(grouping),
        "members": members,
        "unassigned": _unassigned(scenario, holders_of, revoking),
        "revoking": revoking,
        "followup_rebalance": bool(followup_rebalance),
        "stats": merged,
    }
    if incoming:
        # Only when something is withheld: results without it keep their old shape.
        result["incoming"] = incoming
    return result


# --------------------------------------------------------------------------- any strategy


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


def _holders(scenario: Scenario, actives: dict[str, dict[str, list[int]]]) -> dict[str, list[int]]:
    """Holder arrays of the placement; of two members placing one partition the last
    (in member-id order) holds it, as every strategy places a partition once anyway."""
    holders_of: dict[str, list[int]] = {}
    for i, by_topic in enumerate(actives.values()):
        for topic, partitions in by_topic.items():
            count = scenario.topics.get(topic)
            if count is None:
                continue
            holders = holders_of.get(topic)
            if holders is None:
                holders = holders_of[topic] = [-1] * count
            if partitions and (partitions[0] < 0 or partitions[-1] >= count):  # sorted lists
                partitions = [p for p in partitions if 0 <= p < count]
            deque(map(holders.__setitem__, partitions, repeat(i)), maxlen=0)  # in C
    return holders_of


def _standbys_missing(
    scenario: Scenario,
    grouping: Grouping,
    active_tasks: _HeldTasks,
    standby_tasks: _HeldTasks,
) -> int:
    wanted = {
        group.index: k
        for group in grouping.groups
        if group.stateful and (k := wanted_standbys(scenario.num_standbys, len(group.eligible))) > 0
    }
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


def build_result(
    strategy: str,
    scenario: Scenario,
    grouping: Grouping,
    *,
    active: Placement,
    standby: Placement | None = None,
    warmup: Placement | None = None,
    revoking: Placement | None = None,
    incoming: Placement | None = None,
    followup_rebalance: bool = False,
    stats: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The contract's result object for any strategy's decision (see module docs)."""
    ids = list(scenario.members)
    actives = _normalise(active, ids)
    standbys = _normalise(standby, ids)
    warmups = _normalise(warmup, ids)
    revokes = {m: ps for m, ps in _normalise(revoking, ids).items() if ps}
    incomings = {m: ps for m, ps in _normalise(incoming, ids).items() if ps}

    active_tasks = _tasks_held(actives, grouping)
    standby_tasks = _tasks_held(standbys, grouping)
    return _finish(
        strategy,
        scenario,
        grouping,
        members={
            m: {"active": actives[m], "standby": standbys[m], "warmup": warmups[m]} for m in ids
        },
        holders_of=_holders(scenario, actives),
        whole_tasks=False,
        revoking=revokes,
        incoming=incomings,
        followup_rebalance=followup_rebalance,
        stats=stats,
        active_count=[_task_count(active_tasks[m]) for m in ids],
        standby_count=[_task_count(standby_tasks[m]) for m in ids],
        group_counts=(
            [len(active_tasks[m].get(group.index, ())) for m in group.eligible]
            for group in grouping.groups
        ),
        standbys_missing=_standbys_missing(scenario, grouping, active_tasks, standby_tasks),
        warmups=sum(map(_task_count, _tasks_held(warmups, grouping).values())),
    )


# --------------------------------------------------------------------------- the stateful decision


@dataclass
class Decision:
    """What the stateful strategy decided, by member index (see `TaskFacts.members`)."""

    #: member ids, index -> id
    names: list[str]
    #: owner[g][p]: member holding task (g, p) active, or -1
    owner: list[list[int]]
    #: g -> p -> members holding a standby of (g, p), for groups that want standbys
    standbys: dict[int, list[list[int]]]
    #: task -> member holding a warmup replica of it
    warmups: dict[Task, int]


def _standby_holders(chosen: list[list[int]]) -> Iterable[list[int]]:
    """One holder array per standby slot: the j-th standby of each task, or -1."""
    depth = max(map(len, chosen), default=0)
    if depth == 1:
        yield [c[0] if c else -1 for c in chosen]
        return
    for j in range(depth):
        yield [c[j] if len(c) > j else -1 for c in chosen]


def _place(
    by_member: list[dict[str, list[int]]], topics: tuple[str, ...], runs: dict[int, list[int]]
) -> None:
    """Partition lists of ``runs`` onto every topic of one group, one list object each."""
    for m, partitions in runs.items():
        placed = by_member[m]
        for topic in topics:
            current = placed.get(topic)
            # A second slot's standbys of the same group: merge, still sorted.
            placed[topic] = list(partitions) if current is None else sorted(current + partitions)


def _sorted_topics(placement: dict[str, list[int]]) -> dict[str, list[int]]:
    return placement if len(placement) < 2 else dict(sorted(placement.items()))


def _members(
    names: list[str],
    active: list[dict[str, list[int]]],
    standby: list[dict[str, list[int]]],
    warmup: list[dict[str, list[int]]],
    *,
    several: bool,
) -> dict[str, dict[str, dict[str, list[int]]]]:
    """The result's ``members``, topics in order.

    One group's topics are placed in its (sorted) topic order already; only
    topics of several groups can interleave and need sorting per member.
    """
    if not several:
        return {
            name: {"active": a, "standby": s, "warmup": w}
            for name, a, s, w in zip(names, active, standby, warmup, strict=True)
        }
    return {
        name: {
            "active": _sorted_topics(a),
            "standby": _sorted_topics(s),
            "warmup": _sorted_topics(w),
        }
        for name, a, s, w in zip(names, active, standby, warmup, strict=True)
    }


def build_task_result(
    scenario: Scenario,
    grouping: Grouping,
    decision: Decision,
    *,
    followup_rebalance: bool,
    stats: dict[str, Any],
) -> dict[str, Any]:
    """The contract's result for an eager-protocol ``stateful`` decision (see module docs)."""
    groups = grouping.groups
    size = len(decision.names)
    active: list[dict[str, list[int]]] = [{} for _ in range(size)]
    standby: list[dict[str, list[int]]] = [{} for _ in range(size)]
    warmup: list[dict[str, list[int]]] = [{} for _ in range(size)]
    index_of = {m: i for i, m in enumerate(decision.names)}
    active_count = [0] * size
    standby_count = [0] * size
    group_counts: list[list[int]] = []
    for group in groups:
        runs = runs_by_member(decision.owner[group.index])
        _place(active, group.topics, runs)
        held = [0] * size
        for m, partitions in runs.items():
            held[m] = len(partitions)
            active_count[m] += len(partitions)
        group_counts.append([held[index_of[m]] for m in group.eligible])
    standbys_missing = 0
    for g, chosen in decision.standbys.items():
        group = groups[g]
        for holder in _standby_holders(chosen):
            runs = runs_by_member(holder)
            _place(standby, group.changelog_topics, runs)
            for m, partitions in runs.items():
                standby_count[m] += len(partitions)
        wanted = wanted_standbys(scenario.num_standbys, len(group.eligible))
        standbys_missing += sum(wanted - n for n in map(len, chosen) if n < wanted)
    for (g, p), m in sorted(decision.warmups.items()):
        for topic in groups[g].changelog_topics:
            warmup[m].setdefault(topic, []).append(p)

    return _finish(
        "stateful",
        scenario,
        grouping,
        members=_members(decision.names, active, standby, warmup, several=len(groups) > 1),
        holders_of={topic: decision.owner[g.index] for g in groups for topic in g.topics},
        whole_tasks=True,
        revoking={},
        followup_rebalance=followup_rebalance,
        stats=stats,
        active_count=active_count,
        standby_count=standby_count,
        group_counts=group_counts,
        standbys_missing=standbys_missing,
        warmups=len(decision.warmups),
    )
