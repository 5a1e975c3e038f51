"""Error answers to JoinGroup and SyncGroup (`streamapp.runtime.group.join_answers`).

aiokafka's join round (``_do_rejoin_group``) and its requests are stand-ins here, a base class
below streamapp's in the coordinator's class, with a clock of its own; the broker that answers
so (Kafka 3.9 given a subscription it cannot parse) is in
tests/integration/test_join_group_errors.py.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from aiokafka import errors as kafka_errors
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.group import JoinGroupRequest, SyncGroupRequest

from streamapp.runtime.group import join_answers
from streamapp.runtime.group.join_answers import JoinAnswers, backoff_s, describe_answer

UNKNOWN = kafka_errors.KafkaError(repr(kafka_errors.UnknownError()))
#: What aiokafka raises when the leader's own assignment raised: a bug of this worker.
LEADER_BUG = kafka_errors.KafkaError("ValueError()")
LEADER_BUG.__cause__ = ValueError()


class AiokafkaJoin(GroupCoordinator):  # type: ignore[misc]
    """aiokafka's join round: each attempt sends its requests, then raises what ``outcomes``
    says, or joins."""

    def __init__(self, outcomes: list[tuple[str, BaseException | None]]) -> None:
        self.group_id = "myapp"
        self._retry_backoff_ms = 100
        self.outcomes = outcomes
        self.attempts = 0

    async def _send_req(self, request: Any) -> Any:
        return None

    async def _do_rejoin_group(self, subscription: Any) -> bool:
        self.attempts += 1
        last, error = self.outcomes.pop(0)
        await self._send_req(JoinGroupRequest("myapp", 1, 1, "", None, "consumer", []))
        if last == "SyncGroup":
            await self._send_req(SyncGroupRequest("myapp", 1, "m", None, []))
        if error is not None:
            raise error
        return True


class Coordinator(JoinAnswers, AiokafkaJoin):
    pass


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(join_answers, "_sleep", sleep)
    return slept


async def test_error_answers_are_tried_again_with_a_backoff_and_said_once(
    sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=join_answers.__name__)
    coordinator = Coordinator(
        [("JoinGroup", UNKNOWN), ("SyncGroup", UNKNOWN), ("JoinGroup", UNKNOWN), ("", None)]
    )
    results = [await coordinator._do_rejoin_group(None) for _ in range(4)]
    assert results == [False, False, False, True]  # aiokafka's loop joins again each time
    assert sleeps == [0.1, 0.2, 0.4]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "answered JoinGroup for group myapp with error code -1 (UnknownError" in (
        warnings[0].getMessage()
    )
    assert "joined group myapp again after 3 error answer(s)" in caplog.text
    assert coordinator._join_error_answers == 0


async def test_the_warning_names_the_syncgroup_an_answer_was_for(
    sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    coordinator = Coordinator([("SyncGroup", UNKNOWN)])
    assert await coordinator._do_rejoin_group(None) is False
    assert "answered SyncGroup for group myapp" in caplog.text


@pytest.mark.parametrize(
    "error",
    [
        kafka_errors.GroupAuthorizationFailedError("myapp"),  # the configuration is wrong
        kafka_errors.InvalidSessionTimeoutError(),
        LEADER_BUG,  # not an answer
    ],
)
async def test_what_is_no_error_answer_still_stops_the_worker(
    sleeps: list[float], error: BaseException
) -> None:
    coordinator = Coordinator([("JoinGroup", error)])
    with pytest.raises(type(error)):
        await coordinator._do_rejoin_group(None)
    assert sleeps == []


def test_the_backoff_doubles_to_its_cap() -> None:
    assert [backoff_s(n, 100) for n in (1, 2, 3)] == [0.1, 0.2, 0.4]
    assert backoff_s(40, 100) == join_answers.MAX_BACKOFF_S


def test_an_answer_is_described_by_its_code_and_kafkas_words() -> None:
    assert describe_answer(UNKNOWN) == ("error code -1 (UnknownError: An unexpected server error.)")
    assert describe_answer(kafka_errors.KafkaError("no code here")) == "no code here"
