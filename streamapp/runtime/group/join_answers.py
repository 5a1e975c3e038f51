"""Error answers to JoinGroup and SyncGroup, survived: a backoff and one WARNING, not a crash.

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

So an unexpected error answer to JoinGroup or SyncGroup is not raised: the rebalance is given
up and tried again, after a backoff that doubles from the consumer's ``retry_backoff_ms`` up to
`MAX_BACKOFF_S`. One WARNING names the request and the broker's answer at the first failure,
and one INFO line says when the group was joined again; aiokafka's own ERROR line for each
such answer (`AIOKAFKA_MESSAGES`) is dropped from the log of streamapp's consumer
(`streamapp.runtime.client_log`), and only of it. Answers that say the worker's configuration
is wrong (authorization, session timeout, group id, protocol) still stop it, as before: no wait
can heal them.

aiokafka internals (listed in `streamapp.runtime.group.PRIVATE_NAMES`):
``GroupCoordinator._do_rejoin_group`` (one JoinGroup and SyncGroup round, and the join's
completion: the answers are caught around it), ``_send_req`` (every request to the group's
coordinator: the JoinGroup or SyncGroup an answer belongs to is noted there) and
``_retry_backoff_ms``.
Tests: tests/unit/streamapp/runtime/group/test_join_answers.py;
tests/integration/test_join_group_errors.py.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.group import JoinGroupRequest, SyncGroupRequest

logger = logging.getLogger(__name__)

#: The longest wait between two attempts to join after error answers. Long enough not to hammer
#: a broker that fails every join; short enough that a group the broker serves again resumes
#: within seconds.
MAX_BACKOFF_S = 10.0

#: aiokafka's log messages for the answers handled here (one per attempt, at ERROR), by logger.
AIOKAFKA_MESSAGES = {
    "aiokafka.consumer.group_coordinator": (
        "Unexpected error in join group",
        "Unexpected error from SyncGroup",
    )
}

# The backoff's sleep (the unit tests run it on a clock of their own).
_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

#: The requests whose answers end a rebalance attempt, by the name the WARNING gives them.
_JOIN_REQUESTS = ((JoinGroupRequest, "JoinGroup"), (SyncGroupRequest, "SyncGroup"))


def is_error_answer(exc: BaseException) -> bool:
    """Whether aiokafka raised ``exc`` for an error answer to JoinGroup or SyncGroup.

    aiokafka raises ``KafkaError(repr(error))`` with no cause for an unexpected answer, and
    ``KafkaError(repr(e)) from e`` when the leader's own assignment raised: that one is a bug
    of this worker, not an answer, and still stops it. The answers that say the worker's
    configuration is wrong are raised as their own error types, and still stop it too.
    """
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


def backoff_s(failures: int, retry_backoff_ms: int) -> float:
    """The wait after the ``failures``-th error answer in a row: doubling, at most the cap."""
    base = max(retry_backoff_ms, 1) / 1000
    return float(min(base * 2 ** min(failures - 1, 30), MAX_BACKOFF_S))


class JoinAnswers(GroupCoordinator):  # type: ignore[misc]
    """aiokafka's coordinator, staying in the group through error answers to its joins."""

    #: Error answers since the last successful join.
    _join_error_answers = 0
    #: The JoinGroup or SyncGroup request sent last ("JoinGroup" before the first).
    _join_request_sent = "JoinGroup"

    async def _send_req(self, request: Any) -> Any:
        for request_type, name in _JOIN_REQUESTS:
            if isinstance(request, request_type):
                # The heartbeats stop while a member rejoins: a rebalance's requests go out
                # one after the other, and an error answer belongs to the last one sent.
                self._join_request_sent = name
        return await super()._send_req(request)

    async def _do_rejoin_group(self, subscription: Any) -> bool:
        try:
            joined = bool(await super()._do_rejoin_group(subscription))
        except kafka_errors.KafkaError as exc:
            if not is_error_answer(exc):
                raise
            self._join_error_answers += 1
            if self._join_error_answers == 1:
                logger.warning(
                    "streamapp: the broker answered %s for group %s with %s; this worker stays "
                    "in the group and keeps its local state, and tries again with a backoff "
                    "growing to %.0f s (logged once, until it joins again). A Kafka 3.x broker "
                    "answers so when a member joined with a subscription the broker cannot "
                    "parse (its log then says 'Unexpected error handling request' for "
                    "JOIN_GROUP): the group stays stuck until that member leaves and the "
                    "broker is restarted",
                    self._join_request_sent,
                    self.group_id,
                    describe_answer(exc),
                    MAX_BACKOFF_S,
                )
            await _sleep(backoff_s(self._join_error_answers, self._retry_backoff_ms))
            return False  # aiokafka's loop tries the join again
        if joined and self._join_error_answers:
            logger.info(
                "streamapp: joined group %s again after %d error answer(s) to JoinGroup/SyncGroup",
                self.group_id,
                self._join_error_answers,
            )
            self._join_error_answers = 0
        return joined
