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
6. the cooperative protocol: a partition changing member is revoked: listed
   in ``revoking`` of the member that held it, active nowhere this round, and
   no replica on that member either (it comes back as one in the follow-up);
   and listed in ``incoming`` of the member it was planned for, which claims
   it in the follow-up's join so that round hands it to that member, and
   holds a standby of its changelog partitions meanwhile.

Steps 1-5 are `decide`; the eager result is built straight from its
per-group arrays by `result.build_task_result`, the cooperative one
through `placements` and the generic `result.build_result`.

``followup_rebalance`` is true when a task was held back or a partition is
being revoked: the result is a step, and the group should rebalance again
once warmups caught up or revocations completed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from assignor.active_placement import place_actives
from assignor.facts import Task, TaskFacts
from assignor.grouper import Grouping
from assignor.model import Scenario
from assignor.quotas import active_quotas
from assignor.result import Decision, build_result, build_task_result
from assignor.standby_placement import place_standbys

__all__ = ["assign_stateful", "decide", "placements"]

#: member id -> topic -> partitions
_Placement = dict[str, dict[str, list[int]]]


def _add_each(
    placement: _Placement,
    names: list[str],
    topics: tuple[str, ...],
    holders: Iterable[tuple[int, int]],
) -> None:
    """Place partition p of every topic in ``topics`` on member m, for each (p, m).

    The partitions are collected once per member and copied per topic,
    rather than appended topic by topic for every task.
    """
    by_member: dict[int, list[int]] = {}
    for p, m in holders:
        found = by_member.get(m)
        if found is None:
            by_member[m] = [p]
        else:
            found.append(p)
    for m, partitions in by_member.items():
        by_topic = placement[names[m]]
        for topic in topics:
            current = by_topic.get(topic)
            if current is None:
                by_topic[topic] = list(partitions)
            else:
                current.extend(partitions)


def _by_group(replicas: Iterable[tuple[Task, int]]) -> dict[int, list[tuple[int, int]]]:
    """group index -> (partition, member) for each (task, member)."""
    grouped: dict[int, list[tuple[int, int]]] = {}
    for (g, p), m in replicas:
        grouped.setdefault(g, []).append((p, m))
    return grouped


def _warmups(scenario: Scenario, held_back: dict[Task, int]) -> dict[Task, int]:
    """Warmup replicas for held-back tasks, in task order, at most max_warmup_replicas."""
    first = sorted(held_back)[: scenario.max_warmup_replicas]
    return {task: held_back[task] for task in first}


def _revoke_moving_partitions(
    scenario: Scenario, active: _Placement
) -> tuple[_Placement, dict[str, dict[str, list[int]]], dict[str, dict[str, list[int]]]]:
    """Cooperative protocol: nobody gets a partition its old member still holds.

    Returns the actives left, what each member revokes, and what each member was planned but
    is withheld this round (``incoming``): the follow-up round is planned afresh, and without
    being told, it would place those partitions without the reason this round moved them.

    What a member holds is what it claims (``owned_active``, as checked) and what it says it
    kept through the join (``kept_active``, unchecked): a claim the other rules do not trust
    (a generation the leader never saw) is still a partition that member is processing.
    """
    owner_of: dict[tuple[str, int], str] = {}
    for member_id, by_topic in active.items():
        for topic, partitions in by_topic.items():
            for p in partitions:
                owner_of[(topic, p)] = member_id
    revoking: dict[str, dict[str, list[int]]] = {}
    taken_back: dict[str, dict[str, set[int]]] = {}
    for member_id, member in scenario.members.items():
        held = {t: set(ps) for t, ps in member.owned_active.items()}
        for topic, kept in member.kept_active.items():
            held.setdefault(topic, set()).update(kept)
        for topic, owned in sorted(held.items()):
            for p in sorted(owned):
                new_owner = owner_of.get((topic, p))
                if new_owner == member_id:
                    continue
                revoking.setdefault(member_id, {}).setdefault(topic, []).append(p)
                if new_owner is not None:
                    taken_back.setdefault(new_owner, {}).setdefault(topic, set()).add(p)
    for member_id, revoked in taken_back.items():
        for topic, gone in revoked.items():
            active[member_id][topic] = [p for p in active[member_id][topic] if p not in gone]
    incoming = {
        member_id: {topic: sorted(gone) for topic, gone in sorted(by_topic.items())}
        for member_id, by_topic in taken_back.items()
    }
    return active, revoking, incoming


def _withhold_replicas_of_revoked(
    revoking: dict[str, dict[str, list[int]]], standby: _Placement, warmup: _Placement
) -> None:
    """A member gives up what it revokes entirely for the round: no replica of it there either.

    An old owner is often the best standby of the task it hands over (its store is caught up).
    Kept in its Kafka assignment as a standby, the changelog partition would change role without
    being revoked or newly assigned, and the worker's handlers, which act on those, would never
    start replaying it. Given up now, it comes back as a standby in the follow-up, new to them.
    """
    for member_id, by_topic in revoking.items():
        for topic, gone in by_topic.items():
            for replicas in (standby[member_id], warmup[member_id]):
                kept = replicas.get(topic)
                if kept:
                    replicas[topic] = [p for p in kept if p not in gone]
                    if not replicas[topic]:
                        del replicas[topic]


def _keep_replicas_of_incoming(
    scenario: Scenario, incoming: dict[str, dict[str, list[int]]], standby: _Placement
) -> None:
    """The member a withheld partition is planned for holds a standby of its changelog
    partitions this round: a standby or warmup it has goes on replaying, store open, while
    the old member gives the task up, and the follow-up promotes it in place, as it promotes
    the standby of a crashed member's task, with only the tail to replay.

    Planned as the task's active, the member got no replica of it (rule 4): without this, it
    gave up its caught-up warmup (closing its stores) for the one round in which nobody
    processes the partition, and reopened them in the follow-up. A changelog partition that
    turns from standby to active is not newly assigned, and the worker recovers the promoted
    partition from its store's offset (`streamapp.runtime.replay`).
    """
    for member_id, by_topic in incoming.items():
        for topic, planned in by_topic.items():
            if topic not in scenario.changelog_topics:
                continue
            replicas = standby[member_id]
            replicas[topic] = sorted({*replicas.get(topic, ()), *planned})


def decide(scenario: Scenario, grouping: Grouping) -> tuple[Decision, int]:
    """Steps 1-5 of the module docs: the decision, and how many tasks were held back."""
    groups = list(grouping.groups)
    facts = TaskFacts.collect(scenario, grouping)
    quotas = active_quotas(groups, facts)
    actives = place_actives(groups, quotas, facts)
    warmups = _warmups(scenario, actives.held_back)
    replicas = place_standbys(scenario, groups, actives.owner, facts, actives.held_back, warmups)
    for task in replicas.warmups_as_standby:
        del warmups[task]
    decision = Decision(
        names=facts.members, owner=actives.owner, standbys=replicas.standbys, warmups=warmups
    )
    return decision, len(actives.held_back)


def placements(grouping: Grouping, decision: Decision) -> tuple[_Placement, _Placement, _Placement]:
    """The decision as member id -> topic -> partitions: active, standby, warmup."""
    groups = grouping.groups
    names = decision.names
    active: _Placement = {m: {} for m in names}
    standby: _Placement = {m: {} for m in names}
    warmup: _Placement = {m: {} for m in names}
    for group in groups:
        owned = ((p, owner) for p, owner in enumerate(decision.owner[group.index]) if owner != -1)
        _add_each(active, names, group.topics, owned)
    for g, chosen in decision.standbys.items():
        copies = ((p, m) for p, members in enumerate(chosen) for m in members)
        _add_each(standby, names, groups[g].changelog_topics, copies)
    for g, holders in _by_group(decision.warmups.items()).items():
        _add_each(warmup, names, groups[g].changelog_topics, holders)
    return active, standby, warmup


def assign_stateful(scenario: Scenario, grouping: Grouping) -> dict[str, Any]:
    """The ``stateful`` strategy's result for a parsed scenario (see module docs)."""
    decision, held_back = decide(scenario, grouping)
    stats = {"held_back_for_warmup": held_back}
    if scenario.protocol != "cooperative":
        return build_task_result(
            scenario, grouping, decision, followup_rebalance=held_back > 0, stats=stats
        )
    active, standby, warmup = placements(grouping, decision)
    active, revoking, incoming = _revoke_moving_partitions(scenario, active)
    _withhold_replicas_of_revoked(revoking, standby, warmup)
    _keep_replicas_of_incoming(scenario, incoming, standby)
    return build_result(
        "stateful",
        scenario,
        grouping,
        active=active,
        standby=standby,
        warmup=warmup,
        revoking=revoking,
        incoming=incoming,
        followup_rebalance=held_back > 0 or bool(revoking),
        stats=stats,
    )
