"""KIP-49's fair assignor: least-loaded eligible member, most constrained topics first."""

from __future__ import annotations

import heapq

from assignor.strategies.problem import Outcome, Problem, empty_assignment, sort_assignment


def assign_fair(problem: Problem) -> Outcome:
    """Each partition to the eligible member holding the fewest so far.

    Topics with the fewest subscribers go first, ties to the topic with more
    partitions, then by name: the most constrained choices are made while the
    flexible members are still free to absorb them. Load ties go to the smaller
    member id, which reproduces KIP-49's table exactly.
    """
    assignment = empty_assignment(problem)
    load = dict.fromkeys(problem.members, 0)
    subscribers = {t: problem.subscribers(t) for t in problem.subscribed_topics()}
    order = sorted(subscribers, key=lambda t: (len(subscribers[t]), -problem.topics[t], t))
    for topic in order:
        # One heap per topic suffices: within a topic only its own assignments
        # change its subscribers' loads, and those are pushed back updated.
        heap = [(load[m], m) for m in subscribers[topic]]
        heapq.heapify(heap)
        parts: dict[str, list[int]] = {}
        for partition in range(problem.topics[topic]):
            count, member_id = heapq.heappop(heap)
            parts.setdefault(member_id, []).append(partition)
            load[member_id] = count + 1
            heapq.heappush(heap, (count + 1, member_id))
        for member_id, owned in parts.items():
            assignment[member_id][topic] = owned
    return Outcome(assignment=sort_assignment(assignment))
