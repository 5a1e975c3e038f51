"""What the previous generation left behind, per task: owners, standbys, local state.

`TaskFacts.collect(scenario, grouping)` indexes the scenario once so the
placement passes never rescan members per task:

- ``members``: member ids in scenario order; everything else refers to members
  by their index in it.
- ``previous_owner[g][p]``: the member that held task ``(g, p)`` active (the
  one claiming most of its topics, then the highest generation, then the
  lowest index), or -1. Claims by a member no longer eligible for the group
  are ignored: it cannot keep the task anyway. An unclaimed stateful task is
  treated as held by a caught-up member that claims nothing but has the
  task's state on disk: a member restarted under a new id is sticky by its store.
- ``other_claimants[(g, p)]``: members that claimed some of the task's
  partitions but lost it to ``previous_owner``: at an older generation (a
  worker back from a restart with an old ownership file, see the model's
  ``superseded_active``), or with fewer of the task's topics (possible when a
  previous assignment did not co-partition); they are the next best keepers.
- ``previous_standbys[g][p]``: members that held a standby of a stateful task.
- ``previous_warmups[g][p]``: members that replayed a stateful task's changelog as a
  warmup (a task held back for them): what they say in ``owned_warmup``.
- ``state_lag[g][p]``: member -> lag, for members with local state for the
  task (or that owned it active: a running active is caught up, lag 0).
  ``has_state`` tells whether any task has such an entry.
  ``no_state_lag[g][p]`` is what a member without local state must replay
  (an empty list for a stateless group).

The per-task maps are one dict per group keyed by partition number, not one
dict keyed by ``(g, p)`` tuples: an int key hashes for free, and the hot
loops look tasks up tens of thousands of times without building a tuple.

Lag of a task = sum over its changelog topics of ``end - offset`` (never below
zero); a missing offset counts as 0. Whether a lag is caught up is
`rules.is_caught_up`; gathering facts decides nothing else, except the owner of
an unclaimed task, which `rules.caught_up_members` names (``_state_owner``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import repeat

from assignor.grouper import Grouping
from assignor.model import Scenario
from assignor.rules import caught_up_members, is_caught_up, may_hold_standby

__all__ = ["Task", "TaskFacts"]

#: (group index, partition)
Task = tuple[int, int]


@dataclass
class TaskFacts:
    members: list[str]
    index_of: dict[str, int]
    capacity: list[int]
    previous_owner: list[list[int]]
    other_claimants: dict[Task, list[int]]
    previous_standbys: list[dict[int, list[int]]]
    previous_warmups: list[dict[int, list[int]]]
    state_lag: list[dict[int, dict[int, int]]]
    has_state: bool
    no_state_lag: list[list[int]]
    acceptable_lag: int

    def lag(self, member: int, g: int, p: int) -> int:
        known = self.state_lag[g].get(p)
        if known is not None:
            lag = known.get(member)
            if lag is not None:
                return lag
        totals = self.no_state_lag[g]
        return totals[p] if totals else 0

    def caught_up(self, member: int, g: int, p: int) -> bool:
        """`rules.is_caught_up` for ``member`` on task ``(g, p)``."""
        return is_caught_up(self.lag(member, g, p), self.acceptable_lag)

    @classmethod
    def collect(cls, scenario: Scenario, grouping: Grouping) -> TaskFacts:
        members = list(scenario.members)
        index_of = {member_id: i for i, member_id in enumerate(members)}
        groups = grouping.groups
        eligible = [{index_of[m] for m in g.eligible} for g in groups]
        group_of_topic = grouping.group_of_topic

        previous_owner = [[-1] * g.partitions for g in groups]
        # Only when two members claim topics of one task do we need to count.
        votes: dict[Task, dict[int, int]] = {}
        previous_standbys: list[dict[int, list[int]]] = [{} for _ in groups]
        previous_warmups: list[dict[int, list[int]]] = [{} for _ in groups]
        other_claimants: dict[Task, list[int]] = {}
        for i, member in enumerate(scenario.members.values()):
            # Claims that lost on generation: a worker that restarted with an
            # old ownership file ran these tasks before.
            for topic, partitions in member.superseded_active.items():
                g = group_of_topic.get(topic)
                if g is None or i not in eligible[g]:
                    continue
                for p in partitions:
                    losers = other_claimants.setdefault((g, p), [])
                    if i not in losers:
                        losers.append(i)
            # group -> partitions this member's claims recorded whole: its
            # other topics of the group usually list the very same ones.
            recorded: dict[int, tuple[int, ...]] = {}
            for topic, partitions in member.owned_active.items():
                g = group_of_topic.get(topic)
                if g is None or i not in eligible[g]:
                    continue
                owners = previous_owner[g]
                if not votes and recorded.get(g) == partitions:
                    continue  # the same partitions of another topic of the group: done
                # The common case, in C: nobody else claimed these partitions
                # (this member may have, through another topic of the group).
                if not votes and set(map(owners.__getitem__, partitions)) <= {-1, i}:
                    deque(map(owners.__setitem__, partitions, repeat(i)), maxlen=0)
                    recorded[g] = partitions
                    continue
                for p in partitions:
                    current = owners[p]
                    if current == -1:
                        owners[p] = i
                    elif current != i or (votes and (g, p) in votes):
                        tally = votes.setdefault((g, p), {})
                        tally[i] = tally.get(i, 0) + 1
            for topic, partitions in member.owned_standby.items():
                g = group_of_topic.get(topic)
                if g is None or not groups[g].stateful or i not in eligible[g]:
                    continue
                standbys = previous_standbys[g]
                if standbys.keys().isdisjoint(partitions):  # the common case
                    standbys.update({p: [i] for p in partitions})
                    continue
                for p in partitions:
                    holders = standbys.get(p)
                    if holders is None:
                        standbys[p] = [i]
                    elif i not in holders:
                        holders.append(i)
            for topic, partitions in member.owned_warmup.items():
                g = group_of_topic.get(topic)
                if g is None or not groups[g].stateful or i not in eligible[g]:
                    continue
                warm = previous_warmups[g]
                for p in partitions:
                    holders = warm.setdefault(p, [])
                    if i not in holders:
                        holders.append(i)
        if votes:
            generation = [m.generation for m in scenario.members.values()]
            for (g, p), tally in votes.items():
                # The first claimant was recorded without a vote; count it now.
                first = previous_owner[g][p]
                counted: dict[int, int] = {}
                for i, member in enumerate(scenario.members.values()):
                    if i in tally or i == first:
                        counted[i] = sum(
                            1
                            for topic in groups[g].topics
                            if p in member.owned_active.get(topic, ())
                        )
                ranked = sorted(counted, key=lambda i: (-counted[i], -generation[i], i))
                previous_owner[g][p] = ranked[0]
                # The losers ran the task at some point (a zombie, or a worker
                # that restarted with a stale generation): next best keepers.
                losers = other_claimants.setdefault((g, p), [])
                losers[:0] = [i for i in ranked[1:] if i not in losers]

        state_lag, no_state_lag = cls._lags(scenario, grouping, index_of, eligible)
        restarted = {
            i
            for i, member in enumerate(scenario.members.values())
            if not member.owned_active and not member.owned_standby and member.offsets
        }
        for g, group in enumerate(groups):
            if not group.stateful:
                continue
            owners, lags_of, standbys = previous_owner[g], state_lag[g], previous_standbys[g]
            for p, owner in enumerate(owners):
                lags = lags_of.get(p)
                if owner == -1:
                    if not lags or not restarted:
                        continue
                    owner = cls._state_owner(lags, restarted, scenario.acceptable_recovery_lag)
                    owners[p] = owner
                    if owner == -1:
                        continue
                else:
                    # A running active is caught up.
                    if lags is None:
                        lags_of[p] = {owner: 0}
                    else:
                        lags[owner] = 0
                # A standby that was never asked for (owned_standby of a member
                # that also owns the task active) cannot be both; the owner wins.
                holders = standbys.get(p)
                if holders is not None and owner in holders:
                    standbys[p] = [m for m in holders if may_hold_standby(m, active=owner)]

        return cls(
            members=members,
            index_of=index_of,
            capacity=[m.capacity for m in scenario.members.values()],
            previous_owner=previous_owner,
            other_claimants=other_claimants,
            previous_standbys=previous_standbys,
            previous_warmups=previous_warmups,
            state_lag=state_lag,
            has_state=any(state_lag),
            no_state_lag=no_state_lag,
            acceptable_lag=scenario.acceptable_recovery_lag,
        )

    @staticmethod
    def _state_owner(lags: dict[int, int], restarted: set[int], acceptable: int) -> int:
        """Who ran an unclaimed task before restarting: the first of `rules.caught_up_members`.

        A member that restarted under a new member id claims nothing, but its
        store on disk says what it ran; giving it that task back is stickiness
        by client, not by member id (rule 6). Members that claim something are
        not guessed for: their claims say what they held.
        """
        ready = caught_up_members({m: lag for m, lag in lags.items() if m in restarted}, acceptable)
        return ready[0] if ready else -1

    @staticmethod
    def _lags(
        scenario: Scenario,
        grouping: Grouping,
        index_of: dict[str, int],
        eligible: list[set[int]],
    ) -> tuple[list[dict[int, dict[int, int]]], list[list[int]]]:
        end = scenario.end_offsets
        no_state: list[list[int]] = []
        #: changelog topic -> end offset per partition, as a list
        end_of: dict[str, list[int]] = {}
        for group in grouping.groups:
            if not group.stateful:
                no_state.append([])
                continue
            # Summed topic by topic: one pass over each changelog's end offsets.
            totals = [0] * group.partitions
            for topic in group.changelog_topics:
                ends = [0] * group.partitions
                for p, offset in end.get(topic, {}).items():
                    if p < group.partitions:
                        totals[p] += offset
                        ends[p] = offset
                end_of[topic] = ends
            if len(group.changelog_topics) == 1:
                end_of[group.changelog_topics[0]] = totals  # the same numbers
            no_state.append(totals)
        # Lag per (task, member): the task's total minus what the member
        # replayed of each changelog, min(offset, end), in one pass.
        state_lag: list[dict[int, dict[int, int]]] = [{} for _ in grouping.groups]
        for member_id, member in scenario.members.items():
            i = index_of[member_id]
            for topic, by_partition in member.offsets.items():
                found = grouping.group_of_topic.get(topic)
                if found is None or topic not in scenario.changelog_topics:
                    continue
                if i not in eligible[found]:
                    continue
                # Lists indexed by partition: offsets beyond the topic's
                # partition count were dropped as stale by parse_scenario.
                topic_end = end_of[topic]
                totals, lags_of = no_state[found], state_lag[found]
                if topic_end is totals:
                    # The group's only changelog: this member's one entry
                    # per task is its whole lag, nothing to add up.
                    for p, offset in by_partition.items():
                        end_p = totals[p]
                        lag = end_p - offset if offset < end_p else 0
                        lags = lags_of.get(p)
                        if lags is None:
                            lags_of[p] = {i: lag}
                        else:
                            lags[i] = lag
                    continue
                for p, offset in by_partition.items():
                    end_p = topic_end[p]
                    done = offset if offset < end_p else end_p  # min(), without the call
                    lags = lags_of.get(p)
                    if lags is None:
                        lags_of[p] = {i: totals[p] - done}
                    else:
                        lags[i] = lags.get(i, totals[p]) - done
        return state_lag, no_state
