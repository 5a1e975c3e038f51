"""KIP-615's linear-pass sticky assignment for members that all subscribe alike.

With identical subscriptions a balanced assignment gives every member either
floor(P/N) or ceil(P/N) partitions, and only `P mod N` members may hold the
ceiling. That makes the sticky problem a few passes over the members:

1. each member keeps what it owned, up to its capacity: everything when it
   owned at most the floor; the ceiling while ceiling slots remain, else the
   floor;
2. members below the floor are filled from the free partitions in id order
   (interleaved topics, see `space`);
3. the remaining free partitions go one each to members still at the floor.

KIP-615's page also has a pass that steals from max-capacity members when the
free partitions run out while filling. That can only happen when more members
keep the ceiling than `P mod N` allows; step 1 never grants more ceiling slots
than that (as Kafka's merged implementation does), so the free partitions
always cover the floor and the stealing pass has nothing to do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def constrained_assign(
    members: Sequence[str],
    partitions: Sequence[int],
    claims: Mapping[str, Sequence[int]],
) -> dict[str, list[int]]:
    """Balanced (within one) and sticky assignment of `partitions` to `members`.

    `members` must be sorted (it fixes who gets the ceiling and the order of
    filling); `claims` holds each member's valid previous partitions, disjoint
    across members and all within `partitions`.
    """
    if not members:
        return {}
    floor, ceiling_slots = divmod(len(partitions), len(members))
    ceiling = floor + 1 if ceiling_slots else floor

    kept: dict[str, list[int]] = {}
    unfilled: list[str] = []
    at_floor: list[str] = []
    taken: set[int] = set()
    for member_id in members:
        owned = sorted(claims.get(member_id, ()))
        if len(owned) < floor:
            keep = owned
            unfilled.append(member_id)
        elif len(owned) > floor and ceiling_slots > 0:
            keep = owned[:ceiling]
            ceiling_slots -= 1
        else:
            keep = owned[:floor]
            at_floor.append(member_id)
        kept[member_id] = keep
        taken.update(keep)

    free = [pid for pid in partitions if pid not in taken] if taken else list(partitions)
    position = 0
    for member_id in unfilled:
        share = kept[member_id]
        need = floor - len(share)
        share.extend(free[position : position + need])
        position += need
        # Filled members join those at the floor that may still take one more.
        at_floor.append(member_id)

    if position < len(free):
        # Exactly `ceiling_slots` partitions remain; members in id order take one each.
        at_floor.sort()
        for member_id, pid in zip(at_floor, free[position:], strict=False):
            kept[member_id].append(pid)
    return kept
