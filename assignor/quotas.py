"""How many active tasks of each group each member should hold.

Deciding counts first and concrete tasks second keeps both steps linear and
makes balance a property of the counts alone.

`active_quotas(groups, facts) -> list[dict[member, count]]` (one dict per
group; members without tasks in a group may be missing).

Uniform case (every group has the same eligible members, all of one
capacity): a group of ``n`` tasks over ``M`` members gives each ``n // M`` and
``n % M`` of them one extra. Which members get the extras decides overall
balance: with ``R`` extras in all, ``R % M`` members get ``R // M + 1`` and the
rest ``R // M``, so totals differ by at most one as well. Members that held
an extra task of a group before keep it whenever those limits allow, which is
what makes an unchanged, balanced scenario a fixed point.

General case (uneven subscriptions or capacities), KIP-54's notion of
balance: start from what each member held, hand unowned tasks to the member
with the lowest weighted load (``(count + 1) / capacity``), most constrained
groups first, then move single tasks from the most to the least loaded
eligible member while that strictly helps.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence

from assignor.facts import TaskFacts
from assignor.grouper import Group

__all__ = ["active_quotas", "previous_counts"]

Quota = dict[int, int]


def previous_counts(groups: Sequence[Group], facts: TaskFacts) -> list[Quota]:
    """Per group, member -> tasks it held active (eligible members only).

    Two kinds of stateful task count as another member's than their current holder's,
    when that member has caught-up state for it (`TaskFacts.caught_up`, that is
    `rules.is_caught_up`):

    - one a returning worker ran before (its claim lost on generation,
      ``facts.other_claimants``): the balance then leaves the returning worker room for
      its own tasks (rule 6) instead of granting the holder an extra that keeps one of
      them, which would send the returning worker a task it holds no state for;
    - one held back last round for the member that warmed up for it
      (``facts.previous_warmups``, its ``owned_warmup``): the holder kept it only until
      that member caught up (rule 7). Counted as the holder's, it would let the holder
      keep an extra task in the follow-up (rule 5 keeps extras where they were held)
      when the hold-back round had planned that extra for the warm member, and the
      warmup would be wasted.
    """
    counts: list[Quota] = []
    for group in groups:
        # Counted in C; the same keys in the same (first-seen) order as a loop.
        held: Quota = dict(Counter(facts.previous_owner[group.index]))
        held.pop(-1, None)
        counts.append(held)
    if not facts.other_claimants and not any(facts.previous_warmups):
        return counts
    position = {group.index: k for k, group in enumerate(groups)}

    def recount(g: int, p: int, candidates: Sequence[int]) -> bool:
        """Count task (g, p) as the first caught-up candidate's; False if there is none."""
        k = position.get(g)
        owner = facts.previous_owner[g][p]
        if k is None or owner == -1 or not groups[k].stateful:
            return False
        member = next((m for m in candidates if m != owner and facts.caught_up(m, g, p)), -1)
        if member == -1:
            return False
        held = counts[k]
        held[owner] -= 1
        if held[owner] == 0:
            del held[owner]
        held[member] = held.get(member, 0) + 1
        return True

    returned = {
        task for task, claimants in facts.other_claimants.items() if recount(*task, claimants)
    }
    for g, warmed in enumerate(facts.previous_warmups):
        for p, members in warmed.items():
            if (g, p) not in returned:  # a returning worker's own task stays its own
                recount(g, p, members)
    return counts


def _is_uniform(groups: Sequence[Group], facts: TaskFacts) -> bool:
    first = groups[0].eligible
    if any(group.eligible != first for group in groups):
        return False
    capacities = {facts.capacity[facts.index_of[m]] for m in first}
    return len(capacities) == 1


def active_quotas(groups: Sequence[Group], facts: TaskFacts) -> list[Quota]:
    """Per group (in ``groups`` order), member index -> active tasks to hold."""
    live = [g for g in groups if g.eligible]
    held = previous_counts(groups, facts)
    quotas: list[Quota] = [{} for _ in groups]
    if not live:
        return quotas
    position = {g.index: k for k, g in enumerate(groups)}
    if _is_uniform(live, facts):
        solved = _uniform_quotas(live, [held[position[g.index]] for g in live], facts)
    else:
        solved = _weighted_quotas(live, [held[position[g.index]] for g in live], facts)
    for group, quota in zip(live, solved, strict=True):
        quotas[position[group.index]] = quota
    return quotas


def _uniform_quotas(
    groups: Sequence[Group], held: Sequence[Quota], facts: TaskFacts
) -> list[Quota]:
    members = [facts.index_of[m] for m in groups[0].eligible]
    size = len(members)
    base = [group.partitions // size for group in groups]
    extras_needed = [group.partitions % size for group in groups]
    total_extras = sum(extras_needed)
    floor_extras, high_members = divmod(total_extras, size)
    extras: dict[int, int] = dict.fromkeys(members, 0)
    gets_extra: list[set[int]] = [set() for _ in groups]
    at_high = 0  # members holding floor_extras + 1 extras

    def has_room(member: int) -> bool:
        count = extras[member]
        return count < floor_extras or (count == floor_extras and at_high < high_members)

    def grant(k: int, member: int) -> None:
        nonlocal at_high
        if extras[member] == floor_extras:
            at_high += 1
        extras[member] += 1
        gets_extra[k].add(member)

    def revoke(k: int, member: int) -> None:
        nonlocal at_high
        extras[member] -= 1
        if extras[member] == floor_extras:
            at_high -= 1
        gets_extra[k].remove(member)

    def make_room(k: int) -> int:
        """Free a member for group k by handing one of its other extras on.

        Needed when the members with room all hold k's extra already: a
        member y without room gives its extra of group j to a member x with
        room, which leaves y room for k. Returns y, or -1.
        """
        for y in members:
            if y in gets_extra[k] or has_room(y):
                continue
            # Hand on an extra y did not hold before, if it has one: keeps what it held.
            # Of those it held, a stateless one moves before a stateful one.
            mine = [j for j, chosen in enumerate(gets_extra) if y in chosen]
            mine.sort(key=lambda j: (held[j].get(y, 0) > base[j], groups[j].stateful, j))
            for j in mine:
                chosen = gets_extra[j]
                for x in members:
                    if x != y and x not in chosen and has_room(x):
                        revoke(j, y)
                        grant(j, x)
                        if has_room(y):
                            return y
                        revoke(j, x)  # did not help; undo
                        grant(j, y)
        return -1

    # 1. Members that held an extra task keep it while the limits allow, stateful groups
    #    first: a stateless task never displaces a stateful one. Were a stateless extra kept
    #    first (Faust's one-partition leader topic is a group of its own), the member
    #    keeping it could run out of room for the stateful extra it held, and that extra,
    #    a task with state, would move instead of the stateless one.
    for k in sorted(range(len(groups)), key=lambda k: (not groups[k].stateful, k)):
        wanting = sorted(
            (m for m, count in held[k].items() if count > base[k]),
            key=lambda m: (-held[k][m], m),
        )
        for member in wanting:
            if len(gets_extra[k]) == extras_needed[k]:
                break
            if has_room(member):
                grant(k, member)

    # 2. The rest, stateful groups first and groups needing most first, to
    #    members with fewest extras (for a stateful group, then fewest
    #    stateful extras; then those that held most of the group, to move
    #    fewer tasks). Stateful extras spread evenly keep standby counts
    #    balanced too: a member cannot hold a standby of its own active, so
    #    with few members (two, or num_standbys = members - 1) its standby
    #    count is fixed by the stateful actives of the others.
    stateful_extras = dict.fromkeys(members, 0)
    for k, chosen in enumerate(gets_extra):
        if groups[k].stateful:
            for member in chosen:
                stateful_extras[member] += 1
    order = sorted(range(len(groups)), key=lambda k: (len(gets_extra[k]) - extras_needed[k], k))
    for k in order:
        missing = extras_needed[k] - len(gets_extra[k])
        if missing <= 0:
            continue
        weigh_state = groups[k].stateful
        candidates = sorted(
            (m for m in members if m not in gets_extra[k]),
            key=lambda m: (
                extras[m],
                stateful_extras[m] if weigh_state else 0,
                -held[k].get(m, 0),
                m,
            ),
        )
        for member in candidates:
            if missing == 0:
                break
            # Room only shrinks while we grant, so one ordered pass suffices.
            if has_room(member):
                grant(k, member)
                stateful_extras[member] += weigh_state
                missing -= 1
        while missing > 0:
            member = make_room(k)
            if member == -1:  # cannot happen with consistent counts; stay total
                member = min(
                    (m for m in members if m not in gets_extra[k]),
                    key=lambda m: (extras[m], m),
                )
            grant(k, member)
            missing -= 1

    return [{m: base[k] + (m in gets_extra[k]) for m in members} for k in range(len(groups))]


def _weighted_quotas(
    groups: Sequence[Group], held: Sequence[Quota], facts: TaskFacts
) -> list[Quota]:
    capacity = facts.capacity
    eligible = [[facts.index_of[m] for m in g.eligible] for g in groups]
    quotas: list[Quota] = [dict(h) for h in held]
    total: dict[int, int] = {}
    for quota in quotas:
        for member, count in quota.items():
            total[member] = total.get(member, 0) + count

    # Unowned tasks, most constrained groups first, to the least weighted load.
    order = sorted(range(len(groups)), key=lambda k: (len(eligible[k]), k))
    for k in order:
        unowned = groups[k].partitions - sum(quotas[k].values())
        if unowned <= 0:
            continue
        heap = [((total.get(m, 0) + 1) / capacity[m], quotas[k].get(m, 0), m) for m in eligible[k]]
        heapq.heapify(heap)
        for _ in range(unowned):
            _, _, member = heapq.heappop(heap)
            quotas[k][member] = quotas[k].get(member, 0) + 1
            total[member] = total.get(member, 0) + 1
            heapq.heappush(
                heap,
                ((total[member] + 1) / capacity[member], quotas[k][member], member),
            )

    # KIP-54: no task may move to an eligible member and strictly improve balance.
    # Within a group, if any improving move exists, the most loaded holder and
    # the least loaded eligible member form one, so checking that pair suffices.
    # Of the improving moves, take one of a task the giver did not hold before
    # (handed out above), so that what members held stays where it is.
    def improving_move(k: int) -> tuple[int, int] | None:
        holders = [m for m in eligible[k] if quotas[k].get(m, 0) > 0]
        if not holders:
            return None
        giver = max(holders, key=lambda m: (total.get(m, 0) / capacity[m], -m))
        taker = min(eligible[k], key=lambda m: ((total.get(m, 0) + 1) / capacity[m], m))
        # Integer cross-multiplication: (t_b + 1) / c_b < t_a / c_a.
        if (total.get(taker, 0) + 1) * capacity[giver] >= total.get(giver, 0) * capacity[taker]:
            return None
        return giver, taker

    while True:
        moves = [(k, move) for k in order if (move := improving_move(k)) is not None]
        if not moves:
            break
        # A task handed out above moves before a held one, and a stateless one before a
        # stateful one: a stateless task never displaces a stateful one.
        k, (giver, taker) = min(
            moves,
            key=lambda item: (
                quotas[item[0]][item[1][0]] <= held[item[0]].get(item[1][0], 0),
                groups[item[0]].stateful,
                -total.get(item[1][0], 0) / capacity[item[1][0]],
                order.index(item[0]),
            ),
        )
        quotas[k][giver] -= 1
        quotas[k][taker] = quotas[k].get(taker, 0) + 1
        total[giver] -= 1
        total[taker] = total.get(taker, 0) + 1
    return quotas
