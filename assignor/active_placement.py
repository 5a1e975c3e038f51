"""Which concrete tasks each member holds active, given the quotas.

Per group, in three linear passes:

1. Sticky: a member keeps the tasks it held, up to its quota. When it must
   give some up, it first gives those another claimant of the task can take
   (a restarted worker whose claim lost on generation gets its own tasks
   back), then those a caught-up member can take without a replay (contract
   rule 6): first the task a member warmed up for (a follow-up moves the task
   that was held back), then one a caught-up member that is not its standby
   can take, then one its standby can, then the highest partitions.
2. Local state: each task left over goes to a member with free quota that
   can take it without a replay: one that claimed part of it, else a
   caught-up member, least lag first (its standby, or a member that
   restarted with its state on disk). Tasks that fewer members can take
   are placed first, so that a member caught up on several does not use
   its quota on one another member could have taken.
3. The rest fill the remaining quota in member order.

Who is caught up, and in which order caught-up members are tried, is
`rules.is_caught_up` and `rules.caught_up_members` (rule 6); every pass here
asks them, through `TaskFacts.caught_up` or directly.

Then a worker back with an old claim that got tasks not its own swaps them for
its claimed ones with their holders, where neither side must replay.

KIP-441 on top: a stateful task whose target from pass 3 is not caught up,
while some eligible member is, stays active on a caught-up member (its
previous owner if it had one, else the least lag) and is reported in
``held_back`` with its target, which will get a warmup replica.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from assignor.facts import Task, TaskFacts
from assignor.grouper import Group
from assignor.rules import caught_up_members, is_caught_up
from assignor.runs import runs_by_member

__all__ = ["ActivePlacement", "place_actives"]


@dataclass
class ActivePlacement:
    #: owner[g][p]: member index holding task (g, p) active, or -1
    owner: list[list[int]]
    #: task -> member the balanced plan wanted, for tasks held back (rule 7)
    held_back: dict[Task, int] = field(default_factory=dict)


def place_actives(
    groups: list[Group], quotas: list[dict[int, int]], facts: TaskFacts
) -> ActivePlacement:
    placement = ActivePlacement(owner=[[-1] * g.partitions for g in groups])
    load: dict[int, int] = {}
    claimed = _claims_by_group(facts)
    for group, quota in zip(groups, quotas, strict=True):
        if group.eligible:
            _place_group(group, quota, facts, placement, load, claimed.get(group.index, {}))
    return placement


def _claims_by_group(facts: TaskFacts) -> dict[int, dict[int, list[int]]]:
    """group -> member -> partitions it claimed but lost (``facts.other_claimants``), once."""
    claimed: dict[int, dict[int, list[int]]] = {}
    for (g, p), members in facts.other_claimants.items():
        by_member = claimed.setdefault(g, {})
        for m in members:
            by_member.setdefault(m, []).append(p)
    return claimed


def _place_group(
    group: Group,
    quota: dict[int, int],
    facts: TaskFacts,
    placement: ActivePlacement,
    load: dict[int, int],
    claimed: dict[int, list[int]],
) -> None:
    g = group.index
    previous = facts.previous_owner[g]
    owners = placement.owner[g]
    state_lag = facts.state_lag[g]
    acceptable = facts.acceptable_lag

    held = runs_by_member(previous, keep_unowned=True)
    unowned = held.pop(-1, [])
    free = {m: max(q - len(held.get(m, ())), 0) for m, q in quota.items()}

    def takers(p: int) -> list[int]:
        """Who could take task p without a replay: other claimants, then least lag."""
        found = [
            m
            for m in facts.other_claimants.get((g, p), ())
            if m in quota and _can_take(facts, group, m, p)
        ]
        lags = state_lag.get(p)
        if lags:
            found.extend(m for m in caught_up_members(lags, acceptable) if m not in found)
        return found

    standbys = facts.previous_standbys[g]
    warmed = facts.previous_warmups[g]

    def release_rank(p: int, owner: int) -> int:
        """How readily task p is given up: 4 when a member that also claimed it
        can take it (a worker restarted with an older generation wants its own
        tasks back), 3 when the member that warmed up for it can (the task was
        held back for that member last round: the follow-up moves that task,
        not another whose state the member happens to have), 2 when a caught-up
        member that is not its standby can (the same, for members that do not
        report their warmups), 1 when only its caught-up standby can, 0 when
        nobody else can."""
        ready = [m for m in takers(p) if m != owner and free.get(m, 0) > 0]
        if not ready:
            return 0
        if any(m in facts.other_claimants.get((g, p), ()) for m in ready):
            return 4
        if any(m in warmed.get(p, ()) for m in ready):
            return 3
        return 1 if all(m in standbys.get(p, ()) for m in ready) else 2

    # 1. Sticky, giving up first what someone else can take without a replay.
    released: list[int] = []
    for member, partitions in held.items():
        keep = quota.get(member, 0)
        if len(partitions) <= keep:
            for p in partitions:
                owners[p] = member
            continue
        ranked = sorted(partitions, key=lambda p: (release_rank(p, member), p))
        for p in ranked[:keep]:
            owners[p] = member
        released.extend(ranked[keep:])

    # 2. Members that can take a task without a replay, if they have free quota.
    #    When no member has state for any task and nobody lost a claim (a
    #    fresh group), nobody can: every task goes on to pass 3 as it is.
    leftover: list[int] = sorted(unowned + released)
    if facts.has_state or facts.other_claimants:
        # Fewest possible takers first: a task only one member can take gets it before a
        # task that member shares with others does. In task order, a member caught up on
        # two tasks took the first and left the second to pass 3 (and a warmup), while
        # another member could have taken the first without a replay (seen in a rolling
        # restart: w2 and w3 both caught up on task 2, only w2 on task 3).
        candidates = {p: sum(1 for m in takers(p) if free.get(m, 0) > 0) for p in leftover}
        waiting, leftover = sorted(leftover, key=lambda p: (candidates[p], p)), []
        for p in waiting:
            best = next((m for m in takers(p) if free.get(m, 0) > 0), -1)
            if best == -1:
                leftover.append(p)
            else:
                owners[p] = best
                free[best] -= 1
        leftover.sort()

    # 3. Fill what is left in member order.
    open_members = iter(sorted(m for m, n in free.items() if n > 0))
    member = next(open_members, -1)
    for p in leftover:
        while member != -1 and free[member] == 0:
            member = next(open_members, -1)
        if member == -1:  # quotas always cover the group; defensive only
            member = min(quota)
        owners[p] = member
        free[member] = free.get(member, 0) - 1

    if claimed:
        _swap_claimed_tasks_back(group, facts, owners, claimed)

    for p in range(group.partitions):
        load[owners[p]] = load.get(owners[p], 0) + 1
    if group.stateful:
        _hold_back_for_warmups(group, leftover, facts, placement, load)


def _hold_back_for_warmups(
    group: Group,
    moved: list[int],
    facts: TaskFacts,
    placement: ActivePlacement,
    load: dict[int, int],
) -> None:
    """KIP-441: never hand a task to a member that must replay while one need not."""
    if not facts.has_state:
        # No member has state for any task, so every previous owner was -1
        # (an owner's task always has a lag entry) and nobody is caught up
        # to keep a task: nothing to hold back.
        return
    g = group.index
    owners = placement.owner[g]
    acceptable = facts.acceptable_lag
    for p in moved:
        target = owners[p]
        if facts.caught_up(target, g, p):
            continue
        lags = facts.state_lag[g].get(p, {})
        previous = facts.previous_owner[g][p]
        if previous != -1:
            keeper = previous
        else:
            ready = caught_up_members(lags, acceptable)
            if not ready:
                continue
            keeper = min(ready, key=lambda m: (lags[m], load.get(m, 0), m))
        owners[p] = keeper
        load[target] -= 1
        load[keeper] = load.get(keeper, 0) + 1
        placement.held_back[(g, p)] = target


def _swap_claimed_tasks_back(
    group: Group, facts: TaskFacts, owners: list[int], claimed: dict[int, list[int]]
) -> None:
    """A worker back with an old claim gets its own tasks, by exchange where pass 1 could not.

    Pass 1 releases claimed tasks first, but a holder may have more of the worker's
    tasks than it must give up while another holder releases tasks of its own: the
    worker then got tasks that are not its own, equally caught up. Each such spare task
    is exchanged for a claimed one: directly with the claimed task's holder when it can
    take the spare without a replay, else through a third member (the holder takes one
    of its tasks, it takes the spare). Counts (balance) stay as they are and nobody is
    handed a task to replay; one more task moves than strictly needed, the price of
    giving the worker its own state back.
    """
    tasks_of: dict[int, set[int]] = {}  # member -> tasks it holds now, kept up to date
    for p, owner in enumerate(owners):
        tasks_of.setdefault(owner, set()).add(p)

    def give(p: int, to: int) -> None:
        tasks_of[owners[p]].discard(p)
        tasks_of.setdefault(to, set()).add(p)
        owners[p] = to

    for member in sorted(claimed):
        own = set(claimed[member])
        spare = sorted(p for p in tasks_of.get(member, ()) if p not in own)
        for c in sorted(own):
            holder = owners[c]
            if not spare or holder in (-1, member) or not _can_take(facts, group, member, c):
                continue
            exchange = _exchange(group, facts, member, holder, spare, own, tasks_of)
            if exchange is not None:
                t, u, third = exchange
                spare.remove(t)
                give(c, member)
                if third == -1:
                    give(t, holder)
                else:
                    give(u, holder)
                    give(t, third)


def _exchange(
    group: Group,
    facts: TaskFacts,
    member: int,
    holder: int,
    spare: list[int],
    own: set[int],
    tasks_of: dict[int, set[int]],
) -> tuple[int, int, int] | None:
    """(spare task, task the holder takes, third member) for one exchange, or None.

    Direct: the holder takes the spare (third -1). Else a third member gives the holder
    one of its tasks and takes the spare.
    """
    for t in spare:
        if _can_take(facts, group, holder, t):
            return t, t, -1
    if not group.stateful:
        return None  # unreachable: anyone can take a stateless task directly
    lags = facts.state_lag[group.index]
    for t in spare:
        # Only members with state for t can take it without a replay: few, so the search
        # stays cheap however many tasks the group has.
        thirds = sorted(
            m for m, lag in lags.get(t, {}).items() if is_caught_up(lag, facts.acceptable_lag)
        )
        thirds = [m for m in thirds if m not in (member, holder)]
        for third in thirds:
            for u in sorted(tasks_of.get(third, ())):
                if u not in own and _can_take(facts, group, holder, u):
                    return t, u, third
    return None


def _can_take(facts: TaskFacts, group: Group, member: int, p: int) -> bool:
    """Whether ``member`` can take task ``p`` without a replay: any stateless task, a
    stateful one it is caught up on (`rules.is_caught_up`)."""
    return not group.stateful or facts.caught_up(member, group.index, p)
