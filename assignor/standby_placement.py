"""StandbyPlacement: where the replicas of stateful tasks live.

Each stateful task gets ``min(num_standbys, eligible - 1)`` standbys, never on
its active member, never two on one member. Placement domains: a standby goes
to a rack none of the task's other copies use when one exists, else to an
unused host, else anywhere (a member without a host is its own host; without
a rack, its host is its rack).

Counts are balanced like actives: with ``S`` standbys over members of total
capacity ``C``, member ``m`` gets ``floor(S * cap_m / C)``, and the
``S - sum(floors)`` left over go one each to members that can take them, so
with equal capacities the counts differ by at most one.

Passes, each linear in tasks: (1a) every task keeps its previous standbys
where domains and counts allow; (1b) then takes members with its state on
disk (its previous active, the member its active is held back for, others by
lag); (2) the gaps are filled from a heap of members by standby load, tasks
taken one per active member in turn; (3) if fallbacks left counts uneven,
single standbys move from the most to the least loaded member, never to a
worse placement domain.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import zip_longest

from assignor.facts import Task, TaskFacts
from assignor.grouper import Group
from assignor.model import Scenario
from assignor.rules import (
    best_open_tier,
    may_hold_standby,
    replay_order,
    standby_tier,
    wanted_standbys,
)

__all__ = ["StandbyPlacement", "place_standbys"]

#: group index -> partition -> member (a sparse per-task map)
_Sparse = dict[int, dict[int, int]]
_NO_LAGS: dict[int, int] = {}
_NOTHING: dict[int, int] = {}

#: Whether the per-task loops (`_keep_previous`, `_fill_from_heap`, and the
#: scan over every eligible member in `_least_loaded_anyway`) use their inline
#: copies of `rules.may_hold_standby` and `rules.standby_tier`. The calls cost
#: 14% (fresh) and 18% (after a member leaves) of bench/plan_scale.py's
#: 100,000-task plan in the first two, and 80,000 calls in the third there.
#: False sends them through the rules; tests/unit/assignor/test_rules.py
#: requires equal results.
INLINE_RULES = True


@dataclass
class StandbyPlacement:
    #: group index -> partition -> members holding a standby of it (stateful
    #: groups that want standbys only)
    standbys: dict[int, list[list[int]]]
    #: tasks whose warmup target holds a standby instead
    warmups_as_standby: set[Task]


@dataclass
class _Domains:
    host: list[int]
    rack: list[int]

    @classmethod
    def of(cls, scenario: Scenario) -> _Domains:
        """A member without a host is its own host; a host sits in one rack.

        Every member of a host shares the first rack declared on it, so that
        "another rack" always implies "another host" and the best placement
        tier can be told from counts of distinct domains alone.
        """
        hosts: list[object] = []
        rack_of_host: dict[object, object] = {}
        for member_id, member in scenario.members.items():
            host = ("host", member.host) if member.host is not None else ("member", member_id)
            hosts.append(host)
            if member.rack is not None:
                rack_of_host.setdefault(host, ("rack", member.rack))
        racks = [rack_of_host.get(host, host) for host in hosts]
        # Each distinct domain as a small int: only equality matters, and ints
        # hash and compare faster than tuples in the per-task sets.
        ids: dict[object, int] = {}
        return cls(
            host=[ids.setdefault(h, len(ids)) for h in hosts],
            rack=[ids.setdefault(r, len(ids)) for r in racks],
        )


class _Counts:
    """Standby counts with the floor/leftover limits of the module docstring.

    Plain lists indexed by member: the hot loops read them inline rather than
    calling `can_take`/`take` per candidate.
    """

    def __init__(self, members: list[int], size: int, total: int, capacity: list[int]) -> None:
        weight = sum(capacity[m] for m in members)
        self.members = members
        self.capacity = capacity
        self.count = [0] * size
        self.floor = [0] * size
        for m in members:
            self.floor[m] = total * capacity[m] // weight
        self.leftover = total - sum(self.floor[m] for m in members)

    def can_take(self, m: int) -> bool:
        count, floor = self.count[m], self.floor[m]
        return count < floor or (count == floor and self.leftover > 0)

    def take(self, m: int) -> None:
        if self.count[m] == self.floor[m] and self.leftover > 0:
            self.leftover -= 1
        self.count[m] += 1

    def key(self, m: int) -> float:
        return (self.count[m] + 1) / self.capacity[m]


@dataclass
class _Context:
    """What every pass reads, and the standbys chosen so far."""

    wanted: dict[int, int]
    eligible: dict[int, set[int]]
    owners: list[list[int]]
    domains: _Domains
    counts: _Counts
    distinct_hosts: dict[int, int]
    distinct_racks: dict[int, int]
    #: chosen[g][p]: standbys of task (g, p) so far
    chosen: dict[int, list[list[int]]]
    #: g -> p -> member that may not hold a standby of (g, p): it gets a warmup
    blocked: _Sparse
    converted: set[Task]

    def used(self, g: int, p: int) -> tuple[set[int], set[int]]:
        """Hosts and racks of the task's copies so far: its active and chosen standbys.

        Worked out when needed from one or two members, rather than kept in
        two sets per task: fewer long-lived objects at 100,000 tasks.
        """
        active, taken = self.owners[g][p], self.chosen[g][p]
        copies = taken if active == -1 else [active, *taken]
        host, rack = self.domains.host, self.domains.rack
        return {host[m] for m in copies}, {rack[m] for m in copies}

    def best_of(self, g: int, hosts: set[int], racks: set[int]) -> int:
        """The best tier still open for a task of group g whose copies use these domains."""
        return best_open_tier(
            len(hosts), len(racks), self.distinct_hosts[g], self.distinct_racks[g]
        )

    def first_best(self, g: int) -> int:
        """The best tier for a task's first standby beside its active."""
        return best_open_tier(1, 1, self.distinct_hosts[g], self.distinct_racks[g])

    def offer(self, g: int, p: int, candidates: Iterable[int]) -> None:
        """Take candidates in order while they are in the best open tier and have room."""
        k = self.wanted[g]
        active = self.owners[g][p]
        taken = self.chosen[g][p]
        hosts, racks = self.used(g, p)
        not_here = self.blocked.get(g, _NOTHING).get(p, -1)
        allowed = self.eligible[g]
        racks_wanted, hosts_wanted = self.distinct_racks[g], self.distinct_hosts[g]
        host_of, rack_of = self.domains.host, self.domains.rack
        counts = self.counts
        for m in candidates:
            if len(taken) == k:
                return
            if not may_hold_standby(
                m, active=active, warming=not_here, taken=taken, eligible=allowed
            ):
                continue
            rack, host = rack_of[m], host_of[m]
            best = best_open_tier(len(hosts), len(racks), hosts_wanted, racks_wanted)
            if standby_tier(host, rack, hosts, racks) != best or not counts.can_take(m):
                continue
            counts.take(m)
            taken.append(m)
            hosts.add(host)
            racks.add(rack)


def _per_group(by_task: dict[Task, int]) -> _Sparse:
    grouped: _Sparse = {}
    for (g, p), m in by_task.items():
        grouped.setdefault(g, {})[p] = m
    return grouped


def place_standbys(
    scenario: Scenario,
    groups: list[Group],
    owners: list[list[int]],
    facts: TaskFacts,
    warming: dict[Task, int],
    warmups: dict[Task, int],
) -> StandbyPlacement:
    """Standby members per stateful task (see module docs).

    ``warming``: task -> member its active is held back for; that member is
    preferred as a standby, since a standby replays like a warmup, unless
    ``warmups`` already gives it a warmup replica of the task (one copy each),
    unless it is the only member left to hold a wanted standby: then the
    warmup becomes that standby (`StandbyPlacement.warmups_as_standby`).
    """
    wanted = {
        g.index: k
        for g in groups
        if g.stateful and (k := wanted_standbys(scenario.num_standbys, len(g.eligible))) > 0
    }
    if not wanted:
        return StandbyPlacement(standbys={}, warmups_as_standby=set())
    index_of = facts.index_of
    eligible = {g: {index_of[m] for m in groups[g].eligible} for g in wanted}
    everyone = sorted(set().union(*eligible.values()))
    total = sum(groups[g].partitions * k for g, k in wanted.items())
    domains = _Domains.of(scenario)
    ctx = _Context(
        wanted=wanted,
        eligible=eligible,
        owners=owners,
        domains=domains,
        counts=_Counts(everyone, len(facts.members), total, facts.capacity),
        distinct_hosts={g: len({domains.host[m] for m in eligible[g]}) for g in wanted},
        distinct_racks={g: len({domains.rack[m] for m in eligible[g]}) for g in wanted},
        chosen={g: [[] for _ in range(groups[g].partitions)] for g in wanted},
        blocked=_per_group(warmups),
        converted=set(),
    )
    _keep_previous(ctx, facts)
    _take_local_state(ctx, facts, _per_group(warming))
    _fill_from_heap(ctx, _interleaved_by_owner(ctx))
    _repair_balance(ctx)
    return StandbyPlacement(standbys=ctx.chosen, warmups_as_standby=ctx.converted)


def _keep_previous(ctx: _Context, facts: TaskFacts) -> None:
    """1a. Every task's previous standbys first, so that a member with an old
    copy on disk cannot use up the count a previous standby needs."""
    host, rack = ctx.domains.host, ctx.domains.rack
    counts = ctx.counts
    count, floor = counts.count, counts.floor
    inline = INLINE_RULES
    for g in ctx.wanted:
        before_of = facts.previous_standbys[g]
        if not before_of:
            continue
        owners, chosen, lags_of = ctx.owners[g], ctx.chosen[g], facts.state_lag[g]
        blocked, allowed = ctx.blocked.get(g, _NOTHING), ctx.eligible[g]
        first_best = ctx.first_best(g)
        for p in sorted(before_of):
            before = before_of[p]
            if not before:  # its only holder turned out to be its active
                continue
            active = owners[p]
            if len(before) > 1 or active == -1 or not inline:
                lags = lags_of.get(p, _NO_LAGS)
                ctx.offer(g, p, sorted(before, key=lambda m: (lags.get(m, 0), m)))
                continue
            # One previous standby beside a live active, the common case:
            # `offer` inline, since this runs for every stateful task (see
            # INLINE_RULES): `rules.may_hold_standby`, then `rules.standby_tier`
            # against the active's domains only.
            m = before[0]
            if m == active or m == blocked.get(p, -1) or m not in allowed:
                continue
            mine = 0 if rack[m] != rack[active] else 1 if host[m] != host[active] else 2
            if mine != first_best:
                continue
            c, f = count[m], floor[m]
            if c < f or (c == f and counts.leftover > 0):
                if c == f:  # counts.take(m), inline
                    counts.leftover -= 1
                count[m] = c + 1
                chosen[p].append(m)


def _take_local_state(ctx: _Context, facts: TaskFacts, warming: _Sparse) -> None:
    """1b. Then members with the task's state on disk: its previous active,
    the member it is held back for, others by lag."""
    for g, k in ctx.wanted.items():
        previous_owner, lags_of = facts.previous_owner[g], facts.state_lag[g]
        held_back = warming.get(g, _NOTHING)
        if not lags_of and not held_back and max(previous_owner, default=-1) == -1:
            continue  # a fresh group: nobody has anything on disk
        for p, taken in enumerate(ctx.chosen[g]):
            if len(taken) == k:
                continue
            preferred = replay_order(
                previous_owner[p], held_back.get(p, -1), lags_of.get(p, _NO_LAGS)
            )
            if preferred:
                ctx.offer(g, p, preferred)


def _interleaved_by_owner(ctx: _Context) -> list[Task]:
    """Tasks still short of standbys, one per active member in turn.

    Consecutive tasks then have different actives (and domains), so a member
    the heap skips for one task usually fits the next, instead of being
    popped and pushed back for a whole run of tasks of the same active.
    """
    by_owner: dict[int, list[Task]] = {}
    for g, k in ctx.wanted.items():
        owners = ctx.owners[g]
        for p, taken in enumerate(ctx.chosen[g]):
            if len(taken) < k:
                queue = by_owner.get(owners[p])
                if queue is None:
                    by_owner[owners[p]] = [(g, p)]
                else:
                    queue.append((g, p))
    rows = zip_longest(*(by_owner[m] for m in sorted(by_owner)))
    return [task for row in rows for task in row if task is not None]


def _fill_from_heap(ctx: _Context, tasks: list[Task]) -> None:
    """2. Fill the gaps from the least loaded members: a heap of (load, member).

    The search for the least loaded member in the best open tier, and the
    count bookkeeping of `_Counts`, are inline: this runs once per task and
    standby, 10,000 times for a fresh group of 10,000 tasks. See
    `_least_loaded_anyway` for when no member is left in that tier.
    """
    counts = ctx.counts
    count, floor = counts.count, counts.floor
    host_of, rack_of = ctx.domains.host, ctx.domains.rack
    # Heap entries are single ints, load * stride + member, ordered as the
    # (load, member) pairs they stand for: ints compare several times faster
    # than tuples, and each heap operation makes about ten comparisons.
    # load = (count + 1) / capacity, scaled by the capacities' least common
    # multiple to stay an exact integer.
    stride = len(count)
    common = math.lcm(*(counts.capacity[m] for m in counts.members))
    scale = [common // c for c in counts.capacity]
    heap = [(count[m] + 1) * scale[m] * stride + m for m in counts.members if counts.can_take(m)]
    heapq.heapify(heap)
    heappop, heappush, heapreplace = heapq.heappop, heapq.heappush, heapq.heapreplace
    first_best = {g: ctx.first_best(g) for g in ctx.wanted}
    leftover = counts.leftover  # written back before anything else reads it
    inline = INLINE_RULES
    for g, p in tasks:
        k = ctx.wanted[g]
        taken = ctx.chosen[g][p]
        active = ctx.owners[g][p]
        blocked = ctx.blocked.get(g, _NOTHING)
        not_here = blocked.get(p, -1)
        allowed = ctx.eligible[g]
        while len(taken) < k:
            if taken or active == -1:
                hosts, racks = ctx.used(g, p)
                best = ctx.best_of(g, hosts, racks)
            else:  # the common case: the first standby beside the active
                hosts, racks = {host_of[active]}, {rack_of[active]}
                best = first_best[g]
            # Least loaded member in tier `best`; unfit entries are popped
            # past and pushed back after. Pops come in (load, member) order
            # whatever the heap's layout, so this picks exactly what popping
            # and pushing everything back would.
            skipped: list[int] = []
            pick = -1
            while heap:
                load, m = divmod(heap[0], stride)
                c, f = count[m], floor[m]
                if load != (c + 1) * scale[m] or not (c < f or (c == f and leftover > 0)):
                    heappop(heap)  # stale entry, or full for good: counts only grow
                    continue
                if inline:  # the rules' inline copies: see INLINE_RULES
                    if m in (active, not_here) or m in taken or m not in allowed:
                        skipped.append(heappop(heap))
                        continue
                    rack = rack_of[m]
                    tier = 0 if rack not in racks else 1 if host_of[m] not in hosts else 2
                else:
                    if not may_hold_standby(
                        m, active=active, warming=not_here, taken=taken, eligible=allowed
                    ):
                        skipped.append(heappop(heap))
                        continue
                    tier = standby_tier(host_of[m], rack_of[m], hosts, racks)
                if tier != best:
                    skipped.append(heappop(heap))
                    continue
                pick = m
                break
            on_top = pick != -1
            if pick == -1:
                counts.leftover = leftover
                pick = _least_loaded_anyway(ctx, g, p, active, not_here)
            if pick == -1 and p in blocked and blocked[p] not in taken:
                # The member warming up is the only replica left: it holds
                # the standby instead, which replays just the same.
                pick = blocked.pop(p)
                ctx.converted.add((g, p))
            if pick != -1:
                # counts.take(pick), and whether it can take another
                c, f = count[pick], floor[pick]
                if c == f and leftover > 0:
                    leftover -= 1
                count[pick] = c = c + 1
                taken.append(pick)
                room = c < f or (c == f and leftover > 0)
                # Its entry on top gives way to its new load in one sift.
                if on_top and room:
                    heapreplace(heap, (c + 1) * scale[pick] * stride + pick)
                elif on_top:
                    heappop(heap)
                elif room:
                    heappush(heap, (c + 1) * scale[pick] * stride + pick)
            for entry in skipped:
                heappush(heap, entry)
            if pick == -1:
                break
    counts.leftover = leftover


def _least_loaded_anyway(ctx: _Context, g: int, p: int, active: int, warming: int) -> int:
    """When domains or limits cannot all be met: best tier, then lowest load.

    Any member that may hold the standby, whatever its count. This scans every
    eligible member for each task that falls back, so it runs the rules' inline
    copies too (see INLINE_RULES), on the task's domains worked out once.
    """
    taken = ctx.chosen[g][p]
    hosts, racks = ctx.used(g, p)
    host_of, rack_of, load = ctx.domains.host, ctx.domains.rack, ctx.counts.key
    if INLINE_RULES:
        options = [m for m in ctx.eligible[g] if m not in (active, warming) and m not in taken]
        if not options:
            return -1
        return min(
            options,
            key=lambda m: (
                0 if rack_of[m] not in racks else 1 if host_of[m] not in hosts else 2,
                load(m),
                m,
            ),
        )
    options = [
        m
        for m in ctx.eligible[g]
        if may_hold_standby(m, active=active, warming=warming, taken=taken)
    ]
    if not options:
        return -1
    return min(
        options, key=lambda m: (standby_tier(host_of[m], rack_of[m], hosts, racks), load(m), m)
    )


def _repair_balance(ctx: _Context) -> None:
    """3. Even counts out where the sticky passes could not.

    They may have spent the leftover slots before a member that cannot hold
    some task's standby (it is active or warming up for it) got its share,
    or a fallback overloaded one. Moves one standby at a time from the most
    to the least loaded (relative to their floors) while they differ by two
    or more and a move is allowed.
    """
    counts, domains, owners = ctx.counts, ctx.domains, ctx.owners
    members = counts.members
    excess = [counts.count[m] - counts.floor[m] for m in members]
    if not members or max(excess) - min(excess) < 2:
        return

    def tier(m: int, hosts: set[int], racks: set[int]) -> int:
        return standby_tier(domains.host[m], domains.rack[m], hosts, racks)

    def excess_of(m: int) -> int:
        return counts.count[m] - counts.floor[m]

    held: dict[int, list[Task]] = {m: [] for m in members}
    for g, chosen in ctx.chosen.items():
        for p, holders in enumerate(chosen):
            for m in holders:
                held[m].append((g, p))

    def hand_over(giver: int, taker: int) -> bool:
        for task in held[giver]:
            g, p = task
            taken = ctx.chosen[g][p]
            warming = ctx.blocked.get(g, _NOTHING).get(p, -1)
            if not may_hold_standby(
                taker, active=owners[g][p], warming=warming, taken=taken, eligible=ctx.eligible[g]
            ):
                continue
            others = [owners[g][p], *(m for m in taken if m != giver)]
            hosts = {domains.host[o] for o in others}
            racks = {domains.rack[o] for o in others}
            if tier(taker, hosts, racks) > tier(giver, hosts, racks):  # never a worse domain
                continue
            taken[taken.index(giver)] = taker
            held[giver].remove(task)
            held[taker].append(task)
            counts.count[giver] -= 1
            counts.count[taker] += 1
            return True
        return False

    moved = True
    while moved:
        moved = False
        # Only pairs two or more apart are ever tried, so only members at
        # least two above the lowest can give, two below the highest take:
        # sorting just those keeps each round short at 1,000 members.
        excess = [counts.count[m] - counts.floor[m] for m in members]
        high, low = max(excess), min(excess)
        givers = sorted(
            (m for m, e in zip(members, excess, strict=True) if e >= low + 2),
            key=lambda m: (-excess_of(m), m),
        )
        takers = sorted(
            (m for m, e in zip(members, excess, strict=True) if e <= high - 2),
            key=lambda m: (excess_of(m), m),
        )
        for giver in givers:
            for taker in takers:
                if excess_of(giver) - excess_of(taker) < 2:
                    break
                if hand_over(giver, taker):
                    moved = True
                    break
            if moved:
                break
