"""Conflicting active claims of a scenario's members, resolved once for every strategy.

The claim with the highest ``generation`` wins; when several members claim a partition in the
same (highest) generation, nobody wins (Kafka's sticky assignor does the same: the claim cannot
be trusted), and each dropped claim is counted. A claim that lost on generation is kept apart in
the member's ``superseded_active`` (a hint of where state lives, never ownership). A member
claiming a partition both active and standby keeps only the active claim.
"""

from __future__ import annotations

from assignor.model import Claims, Member

__all__ = ["resolve_conflicts"]


def contested_claims(members: dict[str, Member]) -> dict[tuple[str, int], list[Member]]:
    """Active partitions claimed by more than one member, with their claimants in order.

    Claims are first recorded per topic as partition -> first claimant, a
    whole list at a time; only partitions claimed again get a claimant list.
    """
    first: dict[str, dict[int, Member]] = {}
    contested: dict[tuple[str, int], list[Member]] = {}
    for member in members.values():
        for topic, partitions in member.owned_active.items():
            claimed = first.setdefault(topic, {})
            if claimed.keys().isdisjoint(partitions):  # the common case, no set built
                claimed.update(dict.fromkeys(partitions, member))
                continue
            again = claimed.keys() & partitions
            if again:
                for partition in sorted(again):
                    contested.setdefault((topic, partition), [claimed[partition]]).append(member)
                claimed.update((p, member) for p in partitions if p not in again)
            else:
                claimed.update(dict.fromkeys(partitions, member))
    return contested


def resolve_conflicts(members: dict[str, Member]) -> tuple[dict[str, Member], int]:
    """Keep each active claim only where it is the single highest-generation one."""
    rejected: dict[str, set[tuple[str, int]]] = {}
    superseded: dict[str, set[tuple[str, int]]] = {}
    dropped = 0
    for tp, claim in contested_claims(members).items():
        best = max(m.generation for m in claim)
        winners = [m for m in claim if m.generation == best]
        for member in claim:
            if len(winners) > 1 or member.generation != best:
                rejected.setdefault(member.member_id, set()).add(tp)
                dropped += 1
            if member.generation != best and len(winners) == 1:
                superseded.setdefault(member.member_id, set()).add(tp)

    resolved: dict[str, Member] = {}
    for member_id, member in members.items():
        lost = rejected.get(member_id)
        overlap = any(
            topic in member.owned_active
            and not set(member.owned_active[topic]).isdisjoint(partitions)
            for topic, partitions in member.owned_standby.items()
        )
        if lost is None and not overlap:  # nothing to drop: the common case
            resolved[member_id] = member
            continue
        lost = lost or set()
        active: Claims = {}
        for topic, partitions in member.owned_active.items():
            kept = tuple(p for p in partitions if (topic, p) not in lost)
            if kept:
                active[topic] = kept
        standby: Claims = {}
        for topic, partitions in member.owned_standby.items():
            # The member's own active claim (even a rejected one) says the
            # standby claim is not a separate copy.
            mine = set(member.owned_active.get(topic, ()))
            kept = tuple(p for p in partitions if p not in mine)
            if kept:
                standby[topic] = kept
        older: Claims = {}
        for topic, p in sorted(superseded.get(member_id, ())):
            older[topic] = (*older.get(topic, ()), p)
        if active != member.owned_active or standby != member.owned_standby or older:
            member = Member(
                member_id=member.member_id,
                client_id=member.client_id,
                host=member.host,
                rack=member.rack,
                capacity=member.capacity,
                subscription=member.subscription,
                generation=member.generation,
                owned_active=active,
                owned_standby=standby,
                offsets=member.offsets,
                superseded_active=older,
                kept_active=member.kept_active,
                owned_warmup=member.owned_warmup,
            )
        resolved[member_id] = member
    return resolved, dropped
