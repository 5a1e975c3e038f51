"""KIP-315's stream-join sticky assignor.

The unit of assignment is a partition *number*: partition p of every topic goes
to the same member, which a stream-to-stream join needs. Only the numbers below
the smallest partition count among the subscribed topics are assigned; while a
partition-count increase is under way the higher partitions wait (they are not
joinable until every topic has them).

Members' previous numbers come with the epoch of the assignment that gave them;
when two members claim a number the higher epoch wins (a zombie that missed a
rebalance loses). Each member gets floor or ceil of numbers/members; the
ceilings go to the members that held the most, each keeps its own numbers up
to its quota, and the rest fill the others: never-owned numbers first, then
the excess of the members that held the most (KIP-315's fair stealing).
"""

from __future__ import annotations

from assignor.strategies.problem import Outcome, PartitionLists, Problem


def _claimed_numbers(problem: Problem, count: int) -> dict[str, list[int]]:
    """Each member's previous partition numbers below `count`, claims resolved by epoch."""
    order = sorted(problem.members, key=lambda m: (-problem.members[m].generation, m))
    taken: set[int] = set()
    claims: dict[str, list[int]] = {}
    for member_id in order:
        member = problem.members[member_id]
        numbers: set[int] = set()
        for topic, parts in member.owned.items():
            if topic in member.subscription and topic in problem.topics:
                numbers.update(p for p in parts if 0 <= p < count)
        mine = sorted(numbers - taken)
        taken.update(mine)
        claims[member_id] = mine
    return claims


def assign_join_sticky(problem: Problem) -> Outcome:
    topics = problem.subscribed_topics()
    count = min((problem.topics[t] for t in topics), default=0)
    # Only members consuming at least one existing topic can take numbers.
    members = sorted(
        m for m, member in problem.members.items() if member.subscription & set(topics)
    )
    claims = _claimed_numbers(problem, count)

    units: dict[str, list[int]] = {m: [] for m in members}
    if members and count:
        base, extra = divmod(count, len(members))
        by_holding = sorted(members, key=lambda m: (-len(claims[m]), m))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_holding)}

        released: list[int] = []
        for member_id in by_holding:
            own = claims[member_id]
            units[member_id] = own[: quota[member_id]]
            # by_holding order makes the released list start with the numbers
            # of the member that held the most: they are stolen first.
            released.extend(own[quota[member_id] :])
        claimed = {u for m in members for u in claims[m]}
        pool = [u for u in range(count) if u not in claimed] + released

        # Picks go round by round, one number per member and round, so that
        # consecutive free numbers spread over members instead of piling up.
        position = 0
        hungry = [m for m in by_holding if len(units[m]) < quota[m]]
        while hungry:
            still: list[str] = []
            for member_id in hungry:
                units[member_id].append(pool[position])
                position += 1
                if len(units[member_id]) < quota[member_id]:
                    still.append(member_id)
            hungry = still

    assignment: dict[str, PartitionLists] = {m: {} for m in sorted(problem.members)}
    served: dict[str, set[int]] = {t: set() for t in topics}
    for member_id in members:
        numbers = sorted(units[member_id])
        for topic in sorted(problem.members[member_id].subscription & set(topics)):
            if numbers:
                assignment[member_id][topic] = numbers
                served[topic].update(numbers)
    left_unassigned = {
        t: missing
        for t in topics
        if (missing := [p for p in range(problem.topics[t]) if p not in served[t]])
    }
    moved = sum(len(set(claims[m]) - set(units[m])) for m in members)
    return Outcome(
        assignment=assignment, left_unassigned=left_unassigned, stats={"moved_active": moved}
    )
