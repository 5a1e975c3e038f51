"""aiokafka's group coordinator, made to survive error answers to JoinGroup and SyncGroup.

aiokafka 0.14 raises a bare ``KafkaError`` out of a rebalance when the broker answers JoinGroup
or SyncGroup with an error code it does not expect (UNKNOWN_SERVER_ERROR, ...). Its coordination
loop hands that error to the next ``getmany``, where Faust's fetcher crashes and takes the worker
down. A Kafka 3.9 broker answers UNKNOWN_SERVER_ERROR when a member of the group joined with a
subscription the broker itself cannot parse (``non-nullable field topics was serialized as
null`` in its log): the member whose JoinGroup completed the join gets that answer, the others
get no answer at all until their requests time out, and the group stays stuck in
PreparingRebalance until the group's coordinator reloads it (a broker restart, or the
``__consumer_offsets`` partition moving), even after that member left. Nothing a client sends
ends that state; what a worker can do is stay alive, keep its local state, say once what the
broker answered, and keep trying.

A Kafka 4.x broker (its group coordinator rewritten, KIP-848) does not parse that subscription
as it completes the join: it logs a WARN and hands the bytes to the leader as they are. aiokafka's
leader decodes every member's subscription before any assignor runs (``_perform_assignment``),
and bytes it cannot decode (a length past the end: ``Buffer underrun decoding Bytes``; a null
topic list) raised out of the rebalance and crashed the leader, seen on 4.4.0, depending on the
bytes.

So, installed once per process by `install` (from `streamapp.faust_compat.app`, which builds
every worker's transport):

- the leader reads a subscription aiokafka cannot decode as one with no topics whose user data
  is the raw bytes: streamapp's assignor then finds metadata it cannot read, gives that member
  no partitions and says so once, as for any member it cannot read, and the group goes on;

- an unexpected error answer to JoinGroup or SyncGroup is not raised: the rebalance is given up
  and tried again, after a backoff that doubles from the consumer's ``retry_backoff_ms`` up to
  `MAX_BACKOFF_S`. One WARNING names the request and the broker's answer at the first failure,
  and one INFO line says when the group was joined again; aiokafka's own ERROR line for each
  such answer is dropped (a filter on its logger). Answers that say the worker's configuration
  is wrong (authorization, session timeout, group id, protocol) still stop it, as before: no
  wait can heal them.

Private aiokafka names touched, checked at import with the others (`streamapp.faust_compat`),
so that an aiokafka upgrade that renames them fails loudly instead of silently unpatching:

- ``aiokafka.consumer.group_coordinator.CoordinatorGroupRebalance``: methods
  ``perform_group_join`` and ``_send_sync_group_request`` (wrapped), attributes
  ``_coordinator``, ``group_id``, ``_retry_backoff_ms``;
- ``aiokafka.consumer.group_coordinator.GroupCoordinator._perform_assignment`` (wrapped), and
  the ``members`` of the JoinGroup response it is given;
- the logger ``aiokafka.consumer.group_coordinator`` and its two messages for unexpected
  answers;
- ``GroupCoordinator._on_join_prepare`` and ``_on_join_complete`` (wrapped, for the cooperative
  protocol below), and the attributes ``_assignors``, ``_subscription``,
  ``_group_subscription`` and ``_maybe_do_last_autocommit`` they use as aiokafka's own do;
- ``GroupCoordinator._do_commit_offsets`` and ``reset_generation`` (wrapped, for commits of an
  older generation, last below).

The cooperative protocol (KIP-429) on aiokafka's eager coordinator, for a coordinator whose
assignor asks for it (``keeps_owned_through_join()``, streamapp's once its group runs
cooperative; any other assignor keeps aiokafka's eager path):

- the join prepare does what aiokafka's does except revoke: the member keeps processing what
  it owns through JoinGroup and SyncGroup (it says so in its metadata, through the assignor's
  ``on_join_prepared``). A member whose generation was reset (fenced, or unknown to the broker)
  may have lost its partitions to others already, and gives them all up as eager does;
- once the assignment is in, the listener's ``on_partitions_revoked`` gets only what the member
  lost (none, often), then aiokafka applies the assignment, with each kept partition's
  position and pause carried over onto the fresh state aiokafka builds for it (its
  ``assign_from_subscribed`` wrapped for that one call; only when Faust's handlers take the
  join incrementally: one they take the eager way gets every state afresh, as an eager join
  does), and a member that lost anything rejoins at once:
  its next metadata no longer claims what it gave up, and the leader hands that to its new owner.
  Between the two listener calls the assignors are told (``on_incremental_join``), so that
  Faust's handlers go incremental (`streamapp.faust_compat.incremental`).
  Delete the carry-over when aiokafka keeps the state of partitions an assignment keeps.
  Test: tests/unit/streamapp/faust_compat/test_cooperative_join.py.

An OffsetCommit answered ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID resets the member's generation
and member id only if they are still the ones the commit was sent with, as Java's
ConsumerCoordinator does. A member that keeps processing through a cooperative join commits
under the generation it had; once the JoinGroup answer gave it the next one, the broker refuses
that commit, and aiokafka reset the new generation too: the member rejoined under a new member
id, and the group rebalanced once or more again for nothing. The commit still fails (its
offsets are committed again under the new generation); the membership it no longer describes
is left alone. Wrapped: ``GroupCoordinator._do_commit_offsets`` (which builds its request from
``generation`` and ``member_id`` before its first await) and ``reset_generation``, told apart
per commit by a context variable (each commit runs in a task of its own, under aiokafka's
``asyncio.shield``). Delete when aiokafka compares the generation before it resets it.
Test: tests/unit/streamapp/faust_compat/test_commit_generation.py.

After each join of a worker whose group runs cooperative, that worker's coordinator heartbeats
promptly for a moment (`second_round`), so that the second round a member giving partitions up
starts is not held a heartbeat interval.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.consumer import group_coordinator as aiokafka_gc
from aiokafka.coordinator.protocol import ConsumerProtocol, ConsumerProtocolMemberMetadata
from aiokafka.protocol.commit import OffsetCommitRequest

from streamapp.faust_compat import second_round
from streamapp.faust_compat.incremental import partitions_text
from streamapp.faust_compat.once import once

logger = logging.getLogger(__name__)

#: The longest wait between two attempts to join after error answers. Long enough not to hammer
#: a broker that fails every join; short enough that a group the broker serves again resumes
#: within seconds.
MAX_BACKOFF_S = 10.0

#: aiokafka's log messages for the answers this module handles (one per attempt, at ERROR).
_AIOKAFKA_MESSAGES = (
    "Unexpected error in join group",
    "Unexpected error from SyncGroup",
)
#: Answers that say this worker's own configuration is wrong: raised, as aiokafka raises them.
_FATAL = (
    kafka_errors.GroupAuthorizationFailedError,
    kafka_errors.InconsistentGroupProtocolError,
    kafka_errors.InvalidSessionTimeoutError,
    kafka_errors.InvalidGroupIdError,
)


class _AiokafkaAnswerFilter(logging.Filter):
    """Drops aiokafka's per-attempt ERROR lines for the answers this module reports once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(_AIOKAFKA_MESSAGES))


def _is_error_answer(exc: BaseException) -> bool:
    # aiokafka raises ``KafkaError(repr(error))`` with no cause for an unexpected answer, and
    # ``KafkaError(repr(e)) from e`` when the leader's own assignment raised: that one is a bug
    # of this worker, not an answer, and still stops it.
    return type(exc) is kafka_errors.KafkaError and exc.__cause__ is None


def describe_answer(exc: BaseException) -> str:
    """``error code -1 (UnknownError: An unexpected server error.)`` from aiokafka's message."""
    text = str(exc.args[0]) if exc.args else str(exc)
    match = re.fullmatch(r"(\w+)\(.*\)", text)
    error = getattr(kafka_errors, match.group(1), None) if match else None
    if isinstance(error, type) and issubclass(error, kafka_errors.BrokerResponseError):
        errno, description = getattr(error, "errno", "?"), getattr(error, "description", "")
        return f"error code {errno} ({error.__name__}: {description})"
    return text


class _JoinState:
    """Per GroupCoordinator: error answers since the last successful join, and whether the
    join under way kept the member's partitions (cooperative)."""

    def __init__(self) -> None:
        self.failures = 0
        self.kept_owned = False


def _join_state(coordinator: Any) -> _JoinState:
    state = getattr(coordinator, "_streamapp_join_state", None)
    if state is None:
        state = _JoinState()
        coordinator._streamapp_join_state = state
    return state


def backoff_s(failures: int, retry_backoff_ms: int) -> float:
    """The wait after the ``failures``-th error answer in a row: doubling, at most the cap."""
    base = max(retry_backoff_ms, 1) / 1000
    return float(min(base * 2 ** min(failures - 1, 30), MAX_BACKOFF_S))


async def _perform_group_join(self: Any) -> Any:
    state = _join_state(self._coordinator)
    try:
        result = await _original_perform_group_join(self)
    except _FATAL:
        raise
    except kafka_errors.KafkaError as exc:
        if not _is_error_answer(exc):
            raise
        state.failures += 1
        if state.failures == 1:
            request = getattr(exc, "streamapp_request", "JoinGroup")
            logger.warning(
                "streamapp: the broker answered %s for group %s with %s; this worker stays in "
                "the group and keeps its local state, and tries again with a backoff growing "
                "to %.0f s (logged once, until it joins again). A Kafka 3.x broker answers so "
                "when a member joined with a subscription the broker cannot parse (its log "
                "then says 'Unexpected error handling request' for JOIN_GROUP): the group "
                "stays stuck until that member leaves and the broker is restarted",
                request,
                self.group_id,
                describe_answer(exc),
                MAX_BACKOFF_S,
            )
        await asyncio.sleep(backoff_s(state.failures, self._retry_backoff_ms))
        return None  # aiokafka's loop tries the join again
    if result is not None and state.failures:
        logger.info(
            "streamapp: joined group %s again after %d error answer(s) to JoinGroup/SyncGroup",
            self.group_id,
            state.failures,
        )
        state.failures = 0
    return result


async def _send_sync_group_request(self: Any, request: Any) -> Any:
    try:
        return await _original_send_sync_group_request(self, request)
    except kafka_errors.KafkaError as exc:
        if _is_error_answer(exc):
            exc.streamapp_request = "SyncGroup"
        raise


def _decodes(envelope: bytes) -> bool:
    """Whether aiokafka's leader can read this subscription envelope as it reads them."""
    try:
        subscription = ConsumerProtocol.METADATA.decode(envelope).subscription
    except Exception:  # aiokafka's decoder raises ValueError, struct.error, ...
        return False
    # A null topic list decodes to None, which aiokafka then fails to iterate.
    return isinstance(subscription, list) and all(isinstance(t, str) for t in subscription)


def readable_members(members: list[Any]) -> list[Any]:
    """``members`` of a JoinGroup response, each envelope aiokafka cannot decode rewritten.

    A member is ``(member_id, metadata)`` or ``(member_id, group_instance_id, metadata)``. The
    rewrite keeps the raw bytes as user data under no topics, so streamapp's assignor judges
    them (it cannot read them: no partitions for that member) rather than aiokafka's decoder.
    """
    readable = []
    for member in members:
        *head, envelope = member
        if not _decodes(envelope):
            envelope = ConsumerProtocolMemberMetadata(0, [], bytes(envelope)).encode()
            member = (*head, envelope)
        readable.append(member)
    return readable


async def _perform_assignment(self: Any, response: Any) -> Any:
    response.members = readable_members(list(response.members))
    return await _original_perform_assignment(self, response)


def _cooperative_assignors(coordinator: Any) -> list[Any]:
    return [a for a in coordinator._assignors if hasattr(a, "keeps_owned_through_join")]


def _runs_cooperative(coordinator: Any) -> bool:
    """Whether the coordinator's assignors are streamapp's and its group runs cooperative."""
    assignors = _cooperative_assignors(coordinator)
    return bool(assignors) and all(a.keeps_owned_through_join() for a in assignors)


async def _on_join_prepare(self: Any, previous_assignment: Any) -> None:
    assignors = _cooperative_assignors(self)
    keep = (
        bool(assignors)
        and all(a.keeps_owned_through_join() for a in assignors)
        and previous_assignment is not None
        and self.generation != OffsetCommitRequest.DEFAULT_GENERATION_ID
    )
    owned = set(previous_assignment.tps) if previous_assignment is not None else set()
    _join_state(self).kept_owned = keep
    for assignor in assignors:
        assignor.on_join_prepared(kept_owned=keep and bool(owned))
    if not keep:
        await _original_on_join_prepare(self, previous_assignment)
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
    self: Any, generation: int, member_id: str, protocol: str, member_assignment_bytes: bytes
) -> None:
    state = _join_state(self)
    if not state.kept_owned:
        await _original_on_join_complete(
            self, generation, member_id, protocol, member_assignment_bytes
        )
        # A worker that owned nothing (new, or fenced) joined the eager way; if its assignment
        # says the group runs cooperative, a second round may follow, which it must hear of.
        if _runs_cooperative(self):
            second_round.start_prompt_heartbeats(self)
        return
    state.kept_owned = False
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
    assignors = _cooperative_assignors(self)
    # A member that gives something up rejoins once it has; the others hear of it at their next
    # heartbeat, which comes soon, and even while their own handlers below run (`second_round`).
    second_round.start_prompt_heartbeats(self)
    # Faust's handlers go incremental for this join's two listener calls (see
    # `streamapp.faust_compat.incremental`).
    _mark_incremental(assignors, True)
    incrementally = _handled_incrementally(assignors)
    try:
        listener = self._subscription.listener
        if listener is not None:
            try:
                # A join Faust's handlers take the eager way (`incremental.ready`) is an eager
                # rebalance for them: everything owned is revoked, as aiokafka's eager join
                # does. Told only what was lost (often nothing), Faust kept the read marks of
                # the partitions kept: its fetch loop drops every record below a partition's
                # mark, and recovery's next seek moved the mark only for the partitions it
                # sought then. A newcomer's global-table changelogs, fetched afresh from their
                # start (below) while the first pass, cut short, resumed them, lost their
                # first few hundred records to a mark left by that pass
                # (tests/integration/test_rebalance_during_recovery.py).
                res = listener.on_partitions_revoked(lost if incrementally else owned)
                if asyncio.iscoroutine(res):
                    await res
            except Exception:
                logger.exception(
                    "listener %s of group %s failed on_partitions_revoked",
                    listener,
                    self.group_id,
                )
        # Only a join Faust's handlers take incrementally keeps the kept partitions' positions.
        # One they take the eager way (a join during the recovery of an eager rebalance, see
        # `incremental.ready`) gets every state afresh, as an eager join does: Faust's eager
        # revocation empties the changelog queue, and recovery seeks the actives to their
        # stores' offsets only in its next pass. Carried over, a changelog's position stayed
        # past the records that queue held, unapplied: the first pass, cut short, resumed the
        # global tables' changelogs, their records after that gap were applied, and the next
        # pass replayed from there. A newcomer's global table lacked those records for good
        # (4099 of 10000 settings, tests/integration/test_rebalance_during_recovery.py).
        kept = _kept_states(self._subscription, owned & assigned) if incrementally else {}
        subscription = self._subscription
        assign = subscription.assign_from_subscribed

        def assign_keeping_positions(partitions: Any) -> None:
            # aiokafka builds every partition's state afresh: a kept partition would lose its
            # position (fetched again from the committed offset) and its pause.
            assign(partitions)
            _carry_over(subscription, kept)

        subscription.assign_from_subscribed = assign_keeping_positions
        try:
            await _original_on_join_complete(
                self, generation, member_id, protocol, member_assignment_bytes
            )
        finally:
            del subscription.assign_from_subscribed
    finally:
        _mark_incremental(assignors, False)
    if lost:
        # What it gave up goes to its new owners in the next rebalance, which this starts.
        self.request_rejoin()


#: (generation, member id) an OffsetCommit of the current task was sent with; None outside one.
_commit_sent_as: contextvars.ContextVar[tuple[int, str] | None] = contextvars.ContextVar(
    "streamapp_commit_sent_as", default=None
)


async def _do_commit_offsets(self: Any, assignment: Any, offsets: Any) -> Any:
    # aiokafka reads both into the request before its first await: these are what it sends.
    token = _commit_sent_as.set((self.generation, self.member_id))
    try:
        return await _original_do_commit_offsets(self, assignment, offsets)
    finally:
        _commit_sent_as.reset(token)


def _reset_generation(self: Any) -> None:
    sent_as = _commit_sent_as.get()
    if sent_as is not None and sent_as != (self.generation, self.member_id):
        logger.info(
            "streamapp: an offset commit of group %s sent under generation %s was refused; "
            "the member has generation %s since, which it keeps (no rejoin)",
            self.group_id,
            sent_as[0],
            self.generation,
        )
        return
    _original_reset_generation(self)


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


_original_on_join_prepare: Callable[[Any, Any], Awaitable[None]] = (
    aiokafka_gc.GroupCoordinator._on_join_prepare
)
_original_on_join_complete: Callable[[Any, int, str, str, bytes], Awaitable[None]] = (
    aiokafka_gc.GroupCoordinator._on_join_complete
)
_original_perform_assignment: Callable[[Any, Any], Awaitable[Any]] = (
    aiokafka_gc.GroupCoordinator._perform_assignment
)
_original_do_commit_offsets: Callable[[Any, Any, Any], Awaitable[Any]] = (
    aiokafka_gc.GroupCoordinator._do_commit_offsets
)
_original_reset_generation: Callable[[Any], None] = aiokafka_gc.GroupCoordinator.reset_generation
_original_perform_group_join: Callable[[Any], Awaitable[Any]] = (
    aiokafka_gc.CoordinatorGroupRebalance.perform_group_join
)
_original_send_sync_group_request: Callable[[Any, Any], Awaitable[Any]] = (
    aiokafka_gc.CoordinatorGroupRebalance._send_sync_group_request
)


@once
def install() -> None:
    """Patch aiokafka's coordinator classes for this process."""
    rebalance = aiokafka_gc.CoordinatorGroupRebalance
    rebalance.perform_group_join = _perform_group_join
    rebalance._send_sync_group_request = _send_sync_group_request
    aiokafka_gc.GroupCoordinator._perform_assignment = _perform_assignment
    aiokafka_gc.GroupCoordinator._on_join_prepare = _on_join_prepare
    aiokafka_gc.GroupCoordinator._on_join_complete = _on_join_complete
    aiokafka_gc.GroupCoordinator._do_commit_offsets = _do_commit_offsets
    aiokafka_gc.GroupCoordinator.reset_generation = _reset_generation
    logging.getLogger(aiokafka_gc.__name__).addFilter(_AiokafkaAnswerFilter())
