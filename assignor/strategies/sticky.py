"""KIP-54 `sticky` and KIP-429/KIP-615 `cooperative-sticky`.

Both compute the same target: the constrained linear passes of KIP-615 when
every member subscribes alike (Kafka's AbstractStickyAssignor takes the same
shortcut), KIP-54's general path otherwise. `cooperative-sticky` then revokes
every partition that changes owner: the previous owner gives it up this round
(it is listed under `revoking`), nobody gets it until the follow-up rebalance,
in which it is free and goes straight to its new owner.
"""

from __future__ import annotations

from assignor.strategies.constrained import constrained_assign
from assignor.strategies.general import general_assign
from assignor.strategies.problem import Outcome, PartitionLists, Problem
from assignor.strategies.space import PartitionSpace, resolve_claims


def sticky_target(
    problem: Problem, space: PartitionSpace, claims: dict[str, list[int]]
) -> dict[str, list[int]]:
    """The balanced, sticky assignment as ids per member."""
    members = sorted(problem.members)
    if problem.all_subscribe_alike():
        if not space.topics:
            return {m: [] for m in members}
        return constrained_assign(members, space.all_ids(), claims)
    subscriptions = {m: problem.members[m].subscription for m in members}
    return general_assign(space, subscriptions, claims)


def _moved(claims: dict[str, list[int]], target: dict[str, list[int]]) -> dict[str, list[int]]:
    """Per previous owner, the claimed partitions the target gives to someone else."""
    moved: dict[str, list[int]] = {}
    for member_id, owned in claims.items():
        if not owned:
            continue
        kept = set(target.get(member_id, ()))
        lost = [pid for pid in owned if pid not in kept]
        if lost:
            moved[member_id] = lost
    return moved


def assign_sticky(problem: Problem) -> Outcome:
    """KIP-54: balance first, then keep as many previous assignments as possible."""
    space = PartitionSpace(problem)
    claims = resolve_claims(problem, space)
    target = sticky_target(problem, space, claims)
    moved = _moved(claims, target)
    return Outcome(
        assignment={m: space.decode(target.get(m, ())) for m in sorted(problem.members)},
        stats={"moved_active": sum(len(lost) for lost in moved.values())},
    )


def assign_cooperative_sticky(problem: Problem) -> Outcome:
    """The sticky target, minus partitions that must first be revoked by their owner."""
    space = PartitionSpace(problem)
    claims = resolve_claims(problem, space)
    target = sticky_target(problem, space, claims)
    moved = _moved(claims, target)
    revoked: set[int] = set()
    for lost in moved.values():
        revoked.update(lost)
    assignment: dict[str, PartitionLists] = {}
    for member_id in sorted(problem.members):
        ids = target.get(member_id, [])
        if revoked:
            ids = [pid for pid in ids if pid not in revoked]
        assignment[member_id] = space.decode(ids)
    return Outcome(
        assignment=assignment,
        revoking={m: space.decode(lost) for m, lost in sorted(moved.items())},
        followup_rebalance=bool(revoked),
        stats={"moved_active": len(revoked)},
    )
