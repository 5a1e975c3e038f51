"""The ``stateful`` strategy's result, built straight from its per-group task arrays.

`build_task_result(scenario, grouping, decision, stats) -> dict` answers
exactly what `assignor.result.build_result` answers for the same placements
(tests/unit/assignor/test_task_result.py checks that on generated scenarios),
without the round trip through member id -> topic -> partitions maps that
`build_result` must take for any strategy: it would sort and deduplicate
every list, then rebuild per-member task sets to count them. Here the
decision already says, per group, who holds each task, so:

- each member's partitions of a group come from `runs.runs_by_member`
  (one stable sort of the owner array, in C) rather than an append per task;
- counts for the spreads are the lengths of those runs;
- ``moved_active`` checks each claim against the owner array directly;
- ``standbys_missing`` is the shortfall of each task's standby list.

Only for the eager protocol: cooperative revocations edit the placements
partition by partition, and go through `build_result`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from assignor.facts import Task
from assignor.grouper import Grouping
from assignor.model import Scenario
from assignor.result import group_summaries
from assignor.runs import runs_by_member

__all__ = ["Decision", "build_task_result"]


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


def _spread(values: list[int]) -> int:
    return max(values) - min(values) if values else 0


def _moved_active(scenario: Scenario, grouping: Grouping, owner: list[list[int]]) -> int:
    """Tasks with a claimed partition now active on another client (or nowhere).

    As `assignor.result`: counted per (group, partition), topics in no group
    under group -1.
    """
    # Clients as small ints; the extra last entry answers owner -1 (nobody)
    # through Python's index -1, with a number no member's client has.
    number: dict[str, int] = {}
    client = [number.setdefault(m.client_id, len(number)) for m in scenario.members.values()]
    client.append(-1)
    moved: dict[int, set[int]] = {}
    for i, member in enumerate(scenario.members.values()):
        me = client[i]
        # group -> partitions checked: a member's claims on the topics of
        # one group usually list the same partitions, which count once.
        checked: dict[int, tuple[int, ...]] = {}
        for topic, owned in member.owned_active.items():
            g = grouping.group_of_topic.get(topic)
            if g is None:
                moved.setdefault(-1, set()).update(owned)
                continue
            if checked.get(g) == owned:
                continue
            checked[g] = owned
            holders = owner[g]
            # The common case, every claim still with its client, in C.
            now = set(map(client.__getitem__, map(holders.__getitem__, owned)))
            if now == {me} or not owned:
                continue
            gone = [p for p in owned if client[holders[p]] != me]
            moved.setdefault(g, set()).update(gone)
    return sum(map(len, moved.values()))


def _unassigned(scenario: Scenario, grouping: Grouping, owner: list[list[int]]) -> dict[str, Any]:
    unassigned: dict[str, list[int]] = {}
    for topic, count in scenario.topics.items():
        g = grouping.group_of_topic.get(topic)
        if g is None:
            unassigned[topic] = list(range(count))
        elif -1 in owner[g]:
            unassigned[topic] = [p for p, m in enumerate(owner[g]) if m == -1]
    return unassigned


def build_task_result(
    scenario: Scenario,
    grouping: Grouping,
    decision: Decision,
    *,
    followup_rebalance: bool,
    stats: dict[str, Any],
) -> dict[str, Any]:
    """The contract's result for an eager-protocol decision (see module docs)."""
    groups = grouping.groups
    size = len(decision.names)
    active: list[dict[str, list[int]]] = [{} for _ in range(size)]
    standby: list[dict[str, list[int]]] = [{} for _ in range(size)]
    warmup: list[dict[str, list[int]]] = [{} for _ in range(size)]
    index_of = {m: i for i, m in enumerate(decision.names)}
    active_count = [0] * size
    standby_count = [0] * size
    group_spread = 0
    for group in groups:
        runs = runs_by_member(decision.owner[group.index])
        _place(active, group.topics, runs)
        held = [0] * size
        for m, partitions in runs.items():
            held[m] = len(partitions)
            active_count[m] += len(partitions)
        spread = _spread([held[index_of[m]] for m in group.eligible])
        group_spread = max(group_spread, spread)
    standbys_missing = 0
    for g, chosen in decision.standbys.items():
        group = groups[g]
        for holder in _standby_holders(chosen):
            runs = runs_by_member(holder)
            _place(standby, group.changelog_topics, runs)
            for m, partitions in runs.items():
                standby_count[m] += len(partitions)
        wanted = min(scenario.num_standbys, len(group.eligible) - 1)
        standbys_missing += sum(wanted - n for n in map(len, chosen) if n < wanted)
    for (g, p), m in sorted(decision.warmups.items()):
        for topic in groups[g].changelog_topics:
            warmup[m].setdefault(topic, []).append(p)

    eligible_any = {index_of[m] for g in groups for m in g.eligible}
    eligible_stateful = {index_of[m] for g in groups if g.stateful for m in g.eligible}
    computed: dict[str, Any] = {
        "moved_active": _moved_active(scenario, grouping, decision.owner),
        "max_active_spread": _spread([active_count[m] for m in sorted(eligible_any)]),
        "max_group_active_spread": group_spread,
        "max_standby_spread": _spread([standby_count[m] for m in sorted(eligible_stateful)]),
        "standbys_missing": standbys_missing,
        "warmups": len(decision.warmups),
        "stale_claims": scenario.stale_claims,
        "conflicting_claims": scenario.conflicting_claims,
    }
    merged = dict(stats)
    merged.update(computed)
    return {
        "strategy": "stateful",
        "groups": group_summaries(grouping),
        "members": _members(decision.names, active, standby, warmup, several=len(groups) > 1),
        "unassigned": _unassigned(scenario, grouping, decision.owner),
        "revoking": {},
        "followup_rebalance": followup_rebalance,
        "stats": merged,
    }
