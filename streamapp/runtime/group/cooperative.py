"""The cooperative protocol (KIP-429) on aiokafka's eager coordinator.

aiokafka has no cooperative protocol (aio-libs/aiokafka #1126): at each rebalance its member
revokes everything it owns before it joins, and every partition of the group stops until the
join is through. A coordinator whose assignor asks for it (``keeps_owned_through_join()``,
streamapp's once its group runs cooperative; any other assignor keeps aiokafka's eager path)
goes through a join as KIP-429 says instead:

- the join prepare does what aiokafka's does except revoke: the member keeps processing what
  it owns through JoinGroup and SyncGroup (it says so in its metadata, through the assignor's
  ``on_join_prepared``). A member whose generation was reset (fenced, or unknown to the broker)
  may have lost its partitions to others already, and gives them all up as eager does;
- once the assignment is in, the listener's ``on_partitions_revoked`` gets only what the member
  lost (none, often), then aiokafka applies the assignment, with each kept partition's
  position and pause carried over onto the fresh state aiokafka builds for it (the
  subscription's ``assign_from_subscribed`` wrapped for that one call, on this consumer's
  subscription object; only when Faust's handlers take the join incrementally: one they take
  the eager way gets every state afresh, as an eager join does), and a member that lost
  anything rejoins at once: its next metadata no longer claims what it gave up, and the leader
  hands that to its new owner. Between the two listener calls the assignors are told
  (``on_incremental_join``), so that Faust's handlers go incremental
  (`streamapp.runtime.rebalance`).
  Delete the carry-over when aiokafka keeps the state of partitions an assignment keeps.

After each join of a worker whose group runs cooperative, its heartbeats are prompt for a moment
(`streamapp.runtime.group.prompt_heartbeats`), so that the second round a member giving
partitions up starts is not held a heartbeat interval.

aiokafka internals (listed in `streamapp.runtime.group.PRIVATE_NAMES`):
``GroupCoordinator._on_join_prepare`` and ``_on_join_complete`` (overridden, aiokafka's own
called for the eager path and to apply the assignment), and the attributes ``_assignors``,
``_subscription``, ``_group_subscription`` and ``_maybe_do_last_autocommit`` they use as
aiokafka's own do.
Tests: tests/unit/streamapp/runtime/group/test_cooperative_join.py;
tests/integration/test_cooperative_rebalance.py and the other test_cooperative_*.py.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.coordinator.protocol import ConsumerProtocol
from aiokafka.protocol.commit import OffsetCommitRequest

from streamapp.runtime.group.prompt_heartbeats import PromptHeartbeats
from streamapp.runtime.partitions_text import partitions_text

logger = logging.getLogger(__name__)


class CooperativeJoin(PromptHeartbeats):
    """aiokafka's coordinator, keeping what it owns through a join when its assignor asks."""

    #: Whether the join under way kept the member's partitions (cooperative).
    _join_kept_owned = False

    def _cooperative_assignors(self) -> list[Any]:
        return [a for a in self._assignors if hasattr(a, "keeps_owned_through_join")]

    def _runs_cooperative(self) -> bool:
        """Whether the coordinator's assignors are streamapp's and its group runs cooperative."""
        assignors = self._cooperative_assignors()
        return bool(assignors) and all(a.keeps_owned_through_join() for a in assignors)

    async def _on_join_prepare(self, previous_assignment: Any) -> None:
        assignors = self._cooperative_assignors()
        keep = (
            self._runs_cooperative()
            and previous_assignment is not None
            and self.generation != OffsetCommitRequest.DEFAULT_GENERATION_ID
        )
        owned = set(previous_assignment.tps) if previous_assignment is not None else set()
        self._join_kept_owned = keep
        for assignor in assignors:
            assignor.on_join_prepared(kept_owned=keep and bool(owned))
        if not keep:
            await super()._on_join_prepare(previous_assignment)
            return
        # aiokafka's prepare, without the revocation of every partition, and without
        # ``begin_reassignment``: that flag makes aiokafka's fetcher hand out no record until the
        # SyncGroup answers, which stopped every kept partition for the whole join (1-2 s while a
        # new worker starts). Under KIP-429 a member owns what it holds until it revokes it after
        # the join, so handing those records out meanwhile is safe.
        self._group_subscription = None
        try:
            await self._maybe_do_last_autocommit(previous_assignment)
        except kafka_errors.KafkaError as err:
            logger.error("OffsetCommit failed before join, ignoring: %s", err)
        logger.info(
            "streamapp: keeping %d partition(s) through the rebalance of group %s (cooperative)",
            len(owned),
            self.group_id,
        )

    async def _on_join_complete(
        self, generation: int, member_id: str, protocol: str, member_assignment_bytes: bytes
    ) -> None:
        if not self._join_kept_owned:
            await super()._on_join_complete(
                generation, member_id, protocol, member_assignment_bytes
            )
            # A worker that owned nothing (new, or fenced) joined the eager way; if its
            # assignment says the group runs cooperative, a second round may follow, which it
            # must hear of.
            if self._runs_cooperative():
                self.start_prompt_heartbeats()
            return
        self._join_kept_owned = False
        owned = set(self._subscription.assigned_partitions())
        assigned = set(ConsumerProtocol.ASSIGNMENT.decode(member_assignment_bytes).partitions())
        lost = owned - assigned
        logger.info(
            "streamapp: cooperative rebalance of group %s (generation %s): kept %d partition(s), "
            "giving up %s, gaining %s",
            self.group_id,
            generation,
            len(owned & assigned),
            partitions_text(lost),
            partitions_text(assigned - owned),
        )
        assignors = self._cooperative_assignors()
        # A member that gives something up rejoins once it has; the others hear of it at their
        # next heartbeat, which comes soon, and even while their own handlers below run.
        self.start_prompt_heartbeats()
        # Faust's handlers go incremental for this join's two listener calls (see
        # `streamapp.runtime.rebalance`).
        _mark_incremental(assignors, True)
        incrementally = _handled_incrementally(assignors)
        try:
            await self._revoke(lost if incrementally else owned)
            # Only a join Faust's handlers take incrementally keeps the kept partitions'
            # positions. One they take the eager way (a join during the recovery of an eager
            # rebalance, see `incremental.ready`) gets every state afresh, as an eager join
            # does: Faust's eager revocation empties the changelog queue, and recovery seeks the
            # actives to their stores' offsets only in its next pass. Carried over, a
            # changelog's position stayed past the records that queue held, unapplied: the
            # first pass, cut short, resumed the global tables' changelogs, their records after
            # that gap were applied, and the next pass replayed from there. A newcomer's global
            # table lacked those records for good (4099 of 10000 settings,
            # tests/integration/test_rebalance_during_recovery.py).
            kept = _kept_states(self._subscription, owned & assigned) if incrementally else {}
            subscription = self._subscription
            assign = subscription.assign_from_subscribed

            def assign_keeping_positions(partitions: Any) -> None:
                # aiokafka builds every partition's state afresh: a kept partition would lose
                # its position (fetched again from the committed offset) and its pause.
                assign(partitions)
                _carry_over(subscription, kept)

            # This consumer's subscription object only, for this one call.
            subscription.assign_from_subscribed = assign_keeping_positions
            try:
                await super()._on_join_complete(
                    generation, member_id, protocol, member_assignment_bytes
                )
            finally:
                del subscription.assign_from_subscribed
        finally:
            _mark_incremental(assignors, False)
        if lost:
            # What it gave up goes to its new owners in the next rebalance, which this starts.
            self.request_rejoin()

    async def _revoke(self, revoked: set[Any]) -> None:
        """The listener's ``on_partitions_revoked``, as aiokafka calls it.

        A join Faust's handlers take the eager way (`incremental.ready`) is an eager rebalance
        for them: everything owned is revoked, as aiokafka's eager join does. Told only what was
        lost (often nothing), Faust kept the read marks of the partitions kept: its fetch loop
        drops every record below a partition's mark, and recovery's next seek moved the mark
        only for the partitions it sought then. A newcomer's global-table changelogs, fetched
        afresh from their start while the first pass, cut short, resumed them, lost their first
        few hundred records to a mark left by that pass
        (tests/integration/test_rebalance_during_recovery.py).
        """
        listener = self._subscription.listener
        if listener is None:
            return
        try:
            res = listener.on_partitions_revoked(revoked)
            if asyncio.iscoroutine(res):
                await res
        except Exception:
            logger.exception(
                "listener %s of group %s failed on_partitions_revoked", listener, self.group_id
            )


def _handled_incrementally(assignors: list[Any]) -> bool:
    """Whether Faust's handlers take the join under way incrementally (`_mark_incremental`
    asked, and every assignor took it so)."""
    return bool(assignors) and all(getattr(a, "incremental_join", False) for a in assignors)


def _mark_incremental(assignors: list[Any], incremental: bool) -> None:
    for assignor in assignors:
        if hasattr(assignor, "on_incremental_join"):
            assignor.on_incremental_join(incremental)


def _kept_states(subscription: Any, kept: set[Any]) -> dict[Any, Any]:
    assignment = subscription.subscription.assignment if subscription.subscription else None
    if assignment is None:
        return {}
    states = {tp: assignment.state_value(tp) for tp in kept}
    return {tp: state for tp, state in states.items() if state is not None}


def _carry_over(subscription: Any, kept: dict[Any, Any]) -> None:
    """Each kept partition's position, pause and marks, onto its new state (synchronously, so
    aiokafka's fetcher never sees a kept partition without them)."""
    assignment = subscription.subscription.assignment
    for tp, old in kept.items():
        new = assignment.state_value(tp)
        if new is None:
            continue
        if old.has_valid_position:
            new.seek(old.position)
        if old.paused:
            new.pause()
        new.highwater, new.lso, new.timestamp = old.highwater, old.lso, old.timestamp
