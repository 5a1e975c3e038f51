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
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from assignor.facts import Task, TaskFacts
from assignor.grouper import Group
from assignor.model import Scenario

__all__ = ["StandbyPlacement", "place_standbys"]

TierOf = Callable[[Task, int], int]
_NO_LAGS: dict[int, int] = {}


@dataclass
class StandbyPlacement:
    #: task -> members holding a standby of it
    standbys: dict[Task, list[int]]
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
    """Standby counts with the floor/leftover limits of the module docstring."""

    def __init__(self, members: list[int], total: int, capacity: list[int]) -> None:
        weight = sum(capacity[m] for m in members)
        self.capacity = capacity
        self.count = dict.fromkeys(members, 0)
        self.floor = {m: total * capacity[m] // weight for m in members} if weight else {}
        self.leftover = total - sum(self.floor.values())

    def can_take(self, m: int) -> bool:
        count, floor = self.count[m], self.floor[m]
        return count < floor or (count == floor and self.leftover > 0)

    def take(self, m: int) -> None:
        if self.count[m] == self.floor[m] and self.leftover > 0:
            self.leftover -= 1
        self.count[m] += 1

    def key(self, m: int) -> float:
        return (self.count[m] + 1) / self.capacity[m]


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
        g.index: min(scenario.num_standbys, len(g.eligible) - 1)
        for g in groups
        if g.stateful and len(g.eligible) > 1
    }
    wanted = {g: k for g, k in wanted.items() if k > 0}
    if not wanted:
        return StandbyPlacement(standbys={}, warmups_as_standby=set())
    index_of = facts.index_of
    eligible = {g: {index_of[m] for m in groups[g].eligible} for g in wanted}
    everyone = sorted(set().union(*eligible.values()))
    total = sum(groups[g].partitions * k for g, k in wanted.items())
    counts = _Counts(everyone, total, facts.capacity)
    domains = _Domains.of(scenario)
    distinct_hosts = {g: len({domains.host[m] for m in eligible[g]}) for g in wanted}
    distinct_racks = {g: len({domains.rack[m] for m in eligible[g]}) for g in wanted}

    chosen: dict[Task, list[int]] = {}
    #: task -> member that may not hold a standby of it (it gets a warmup)
    blocked: dict[Task, int] = {}
    converted: set[Task] = set()

    # The hosts and racks a task's copies use are worked out when needed
    # from its active and chosen standbys (one or two members), rather than
    # kept in two sets per task: fewer long-lived objects at 100,000 tasks.
    def used(task: Task) -> tuple[set[int], set[int]]:
        """Hosts and racks of the task's copies so far: its active and chosen standbys."""
        active = owners[task[0]][task[1]]
        copies = chosen[task] if active == -1 else [active, *chosen[task]]
        return {domains.host[m] for m in copies}, {domains.rack[m] for m in copies}

    def best_of(g: int, hosts: set[int], racks: set[int]) -> int:
        """The best tier still open for a task of group g whose copies use these domains."""
        if len(racks) < distinct_racks[g]:
            return 0
        return 1 if len(hosts) < distinct_hosts[g] else 2

    def tier(task: Task, m: int) -> int:
        hosts, racks = used(task)
        if domains.rack[m] not in racks:
            return 0
        return 1 if domains.host[m] not in hosts else 2

    def accept(task: Task, m: int) -> None:
        counts.take(m)
        chosen[task].append(m)

    def offer(task: Task, candidates: Iterable[int], k: int) -> None:
        # The checks of `tier`, `best_of` and `accept`, on this task's own
        # list and domain sets worked out once: this runs for every stateful task.
        g, p = task
        active = owners[g][p]
        taken = chosen[task]
        hosts, racks = used(task)
        not_here = blocked.get(task)
        allowed = eligible[g]
        racks_wanted, hosts_wanted = distinct_racks[g], distinct_hosts[g]
        for m in candidates:
            if len(taken) == k:
                return
            if m in (active, not_here) or m in taken or m not in allowed:
                continue
            rack, host = domains.rack[m], domains.host[m]
            mine = 0 if rack not in racks else 1 if host not in hosts else 2
            # best_of(g, hosts, racks), on the sets at hand
            best = 0 if len(racks) < racks_wanted else 1 if len(hosts) < hosts_wanted else 2
            if mine != best or not counts.can_take(m):
                continue
            counts.take(m)
            taken.append(m)
            hosts.add(host)
            racks.add(rack)

    # 1a. Sticky: every task's previous standbys first, so that a member with
    #     an old copy on disk cannot use up the count a previous standby needs.
    previous_standbys, state_lag = facts.previous_standbys, facts.state_lag
    for g, k in wanted.items():
        for task in facts.task_keys[g]:
            chosen[task] = []
            if task in warmups:
                blocked[task] = warmups[task]
            before = previous_standbys.get(task)
            if before:
                lags = state_lag.get(task, _NO_LAGS)
                # Sorting one-element lists is most of the work at scale: skip it.
                offer(
                    task,
                    sorted(before, key=lambda m: (lags.get(m, 0), m))
                    if len(before) > 1
                    else before,
                    k,
                )

    # 1b. Then members with the task's state on disk: its previous active, the
    #     member it is held back for, others by lag.
    for g, k in wanted.items():
        previous_owner = facts.previous_owner[g]
        for task in facts.task_keys[g]:
            p = task[1]
            if len(chosen[task]) == k:
                continue
            preferred = [previous_owner[p]] if previous_owner[p] != -1 else []
            if task in warming:
                preferred.append(warming[task])
            lags = facts.state_lag.get(task, _NO_LAGS)
            if len(lags) > 1:
                preferred.extend(sorted(lags, key=lambda m: (lags[m], m)))
            else:
                preferred.extend(lags)
            if preferred:
                offer(task, preferred, k)

    # 2. Fill the gaps from the least loaded members.
    heap = [(counts.key(m), m) for m in everyone if counts.can_take(m)]
    heapq.heapify(heap)
    for task in _interleaved_by_owner(wanted, owners, chosen):
        g, p = task
        k = wanted[g]
        excluded = (owners[g][p], blocked.get(task, -1))
        while len(chosen[task]) < k:
            hosts, racks = used(task)
            pick, skipped = _best_on_top(
                heap,
                counts,
                excluded,
                eligible[g],
                chosen[task],
                domains,
                hosts,
                racks,
                best_of(g, hosts, racks),
            )
            on_top = pick != -1
            if pick == -1:
                pick = _least_loaded_anyway(task, excluded, eligible[g], chosen[task], tier, counts)
            if pick == -1 and task in blocked and blocked[task] not in chosen[task]:
                # The member warming up is the only replica left: it holds
                # the standby instead, which replays just the same.
                pick = blocked.pop(task)
                converted.add(task)
            if pick != -1:
                accept(task, pick)
                # Its entry on top gives way to its new load in one sift.
                if on_top and counts.can_take(pick):
                    heapq.heapreplace(heap, (counts.key(pick), pick))
                elif on_top:
                    heapq.heappop(heap)
                elif counts.can_take(pick):
                    heapq.heappush(heap, (counts.key(pick), pick))
            for entry in skipped:
                heapq.heappush(heap, entry)
            if pick == -1:
                break

    # 3. The sticky passes may have spent the leftover slots before a member
    #    that cannot hold some task's standby (it is active or warming up for
    #    it) got its share, or a fallback overloaded one: even counts out.
    _repair_balance(chosen, counts, owners, blocked, eligible, domains)
    placed = {task: members for task, members in chosen.items() if members}
    return StandbyPlacement(standbys=placed, warmups_as_standby=converted)


def _interleaved_by_owner(
    wanted: dict[int, int],
    owners: list[list[int]],
    chosen: dict[Task, list[int]],
) -> list[Task]:
    """Tasks still short of standbys, one per active member in turn.

    Consecutive tasks then have different actives (and domains), so a member
    the heap skips for one task usually fits the next, instead of being
    popped and pushed back for a whole run of tasks of the same active.
    """
    by_owner: dict[int, list[Task]] = {}
    # chosen holds every task of `wanted`, in (group, partition) order.
    for task, taken in chosen.items():
        g, p = task
        if len(taken) < wanted[g]:
            by_owner.setdefault(owners[g][p], []).append(task)
    queues = [by_owner[m] for m in sorted(by_owner)]
    ordered: list[Task] = []
    depth = max((len(q) for q in queues), default=0)
    for i in range(depth):
        ordered.extend(q[i] for q in queues if i < len(q))
    return ordered


def _repair_balance(
    chosen: dict[Task, list[int]],
    counts: _Counts,
    owners: list[list[int]],
    blocked: dict[Task, int],
    eligible: dict[int, set[int]],
    domains: _Domains,
) -> None:
    def tier(m: int, others: list[int]) -> int:
        """0: a rack no other copy uses; 1: only a new host; 2: neither."""
        if domains.rack[m] not in {domains.rack[o] for o in others}:
            return 0
        return 1 if domains.host[m] not in {domains.host[o] for o in others} else 2

    def excess(m: int) -> int:
        return counts.count[m] - counts.floor[m]

    members = list(counts.count)
    if not members or max(map(excess, members)) - min(map(excess, members)) < 2:
        return
    held: dict[int, list[Task]] = {m: [] for m in members}
    for task, holders in chosen.items():
        for m in holders:
            held[m].append(task)

    def hand_over(giver: int, taker: int) -> bool:
        for task in held[giver]:
            g, p = task
            if (
                taker == owners[g][p]
                or taker == blocked.get(task)
                or taker in chosen[task]
                or taker not in eligible[g]
            ):
                continue
            others = [owners[g][p], *(m for m in chosen[task] if m != giver)]
            if tier(taker, others) > tier(giver, others):
                continue
            chosen[task][chosen[task].index(giver)] = taker
            held[giver].remove(task)
            held[taker].append(task)
            counts.count[giver] -= 1
            counts.count[taker] += 1
            return True
        return False

    # Move one standby at a time from the most to the least loaded (relative
    # to their floors) while they differ by two or more and a move is allowed.
    moved = True
    while moved:
        moved = False
        givers = sorted(members, key=lambda m: (-excess(m), m))
        takers = sorted(members, key=lambda m: (excess(m), m))
        for giver in givers:
            for taker in takers:
                if excess(giver) - excess(taker) < 2:
                    break
                if hand_over(giver, taker):
                    moved = True
                    break
            if moved:
                break


def _best_on_top(
    heap: list[tuple[float, int]],
    counts: _Counts,
    excluded: tuple[int, int],
    eligible: set[int],
    taken: list[int],
    domains: _Domains,
    hosts: set[int],
    racks: set[int],
    best: int,
) -> tuple[int, list[tuple[float, int]]]:
    """Least loaded member in tier ``best``, and the unfit entries popped past.

    ``hosts`` and ``racks`` are those the task's copies use already; a
    member's tier is told from them as `place_standbys`' ``tier`` does. The
    member found stays on top of the heap (the caller replaces its entry
    once its load changed); the caller pushes the skipped entries back. Pops
    come in (load, member) order whatever the heap's layout, so this picks
    exactly what popping and pushing everything back would.
    """
    skipped: list[tuple[float, int]] = []
    while heap:
        key, m = heap[0]
        if key != counts.key(m) or not counts.can_take(m):
            heapq.heappop(heap)  # stale entry, or full for good: counts only grow
            continue
        if m in excluded or m in taken or m not in eligible:
            skipped.append(heapq.heappop(heap))
            continue
        tier = 0 if domains.rack[m] not in racks else 1 if domains.host[m] not in hosts else 2
        if tier != best:
            skipped.append(heapq.heappop(heap))
            continue
        return m, skipped
    return -1, skipped


def _least_loaded_anyway(
    task: Task,
    excluded: tuple[int, int],
    eligible: set[int],
    taken: list[int],
    tier: TierOf,
    counts: _Counts,
) -> int:
    """When domains or limits cannot all be met: best tier, then lowest load."""
    options = [m for m in eligible if m not in excluded and m not in taken]
    if not options:
        return -1
    return min(options, key=lambda m: (tier(task, m), counts.key(m), m))
