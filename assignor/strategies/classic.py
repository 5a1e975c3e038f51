"""Kafka's two baseline assignors, with Kafka's exact semantics.

They keep no state and ignore previous ownership; they are here as the yardstick
the other strategies are measured against.
"""

from __future__ import annotations

from itertools import cycle

from assignor.strategies.problem import Outcome, Problem, empty_assignment, sort_assignment


def assign_range(problem: Problem) -> Outcome:
    """Per topic, consecutive ranges to its subscribers in member-id order.

    The first `partitions % subscribers` members get one extra partition, so
    with many topics the same members are loaded every time (KIP-49's complaint).
    """
    assignment = empty_assignment(problem)
    for topic in problem.subscribed_topics():
        consumers = problem.subscribers(topic)
        count = problem.topics[topic]
        share, extra = divmod(count, len(consumers))
        start = 0
        for i, member_id in enumerate(consumers):
            length = share + (1 if i < extra else 0)
            if length:
                assignment[member_id][topic] = list(range(start, start + length))
            start += length
    return Outcome(assignment=sort_assignment(assignment))


def assign_roundrobin(problem: Problem) -> Outcome:
    """All partitions in (topic, partition) order dealt to members in id order.

    A member not subscribed to a partition's topic is skipped and the deal
    moves on, which is what skews uneven subscriptions (KIP-49's example).
    """
    assignment = empty_assignment(problem)
    if not problem.members:
        return Outcome(assignment=assignment)
    dealer = cycle(sorted(problem.members))
    for topic in problem.subscribed_topics():
        for partition in range(problem.topics[topic]):
            member_id = next(dealer)
            # Terminates: the topic is subscribed by someone (subscribed_topics).
            while topic not in problem.members[member_id].subscription:
                member_id = next(dealer)
            assignment[member_id].setdefault(topic, []).append(partition)
    return Outcome(assignment=sort_assignment(assignment))
