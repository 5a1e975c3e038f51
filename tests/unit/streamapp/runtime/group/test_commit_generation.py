"""An OffsetCommit refused for its generation resets the member only if nothing changed since.

Under the cooperative protocol a member keeps committing through a join; a commit sent under
generation N that the broker refuses after the JoinGroup answer gave the member generation N+1
must leave N+1 (and the member id) alone, as Java's ConsumerCoordinator does. aiokafka reset
both, and the member rejoined once more for nothing. streamapp's coordinator runs here, aiokafka's
own steps from `commit_offsets` down; only the broker's answer is a stand-in.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import errors as kafka_errors
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.structs import OffsetAndMetadata
from aiokafka.structs import TopicPartition as TP

from streamapp.runtime.group.coordinator import Coordinator

ILLEGAL_GENERATION = kafka_errors.IllegalGenerationError.errno
UNKNOWN_MEMBER = kafka_errors.UnknownMemberIdError.errno


class Answer:
    def __init__(self, error_code: int) -> None:
        self.topics = [("t", [(0, error_code)])]


def coordinator(answer: int, *, joined_meanwhile: bool) -> GroupCoordinator:
    """streamapp's coordinator at generation 5, whose broker answers a commit with ``answer``;
    with ``joined_meanwhile``, the next JoinGroup answer (generation 6) arrives while the commit
    is in flight."""
    c: Any = Coordinator.__new__(Coordinator)
    c.group_id, c.generation, c.member_id, c.coordinator_id = "g", 5, "m-1", 0
    c._commit_lock = asyncio.Lock()
    c._retry_backoff_ms = 10
    c._rejoin_needed_fut = asyncio.get_running_loop().create_future()
    sent: list[tuple[int, str]] = []

    async def known() -> None:
        return None

    async def send(request: Any) -> Answer:
        _group, generation, member_id, *_ = request.build(lambda *fields: fields)
        sent.append((generation, member_id))
        if joined_meanwhile:
            c.generation = 6
        return Answer(answer)

    c.ensure_coordinator_known = known
    c._send_req = send
    c.sent = sent
    return c  # type: ignore[no-any-return]


OFFSETS = {TP("t", 0): OffsetAndMetadata(42, "")}


@pytest.mark.parametrize("answer", [ILLEGAL_GENERATION, UNKNOWN_MEMBER])
async def test_a_commit_of_the_old_generation_leaves_the_new_one_alone(answer: int) -> None:
    c: Any = coordinator(answer, joined_meanwhile=True)
    with pytest.raises(kafka_errors.CommitFailedError):
        await c.commit_offsets(None, OFFSETS)
    assert c.sent == [(5, "m-1")]
    assert (c.generation, c.member_id) == (6, "m-1")
    assert not c._rejoin_needed_fut.done()  # no extra rebalance


async def test_a_commit_refused_for_the_generation_it_still_has_resets_it() -> None:
    c: Any = coordinator(ILLEGAL_GENERATION, joined_meanwhile=False)
    with pytest.raises(kafka_errors.CommitFailedError):
        await c.commit_offsets(None, OFFSETS)
    assert (c.generation, c.member_id) == (-1, "")  # aiokafka's reset, as before
    assert c._rejoin_needed_fut.done()


async def test_a_reset_outside_a_commit_is_aiokafkas() -> None:
    c: Any = coordinator(ILLEGAL_GENERATION, joined_meanwhile=False)
    c.reset_generation()  # e.g. a heartbeat's answer
    assert (c.generation, c.member_id) == (-1, "")
    assert c._rejoin_needed_fut.done()


async def test_aiokafkas_coordinator_resets_the_newer_generation_as_it_did() -> None:
    """aiokafka's own class is left as it is: a plain consumer's refused commit still resets."""
    c: Any = coordinator(ILLEGAL_GENERATION, joined_meanwhile=True)
    c.__class__ = GroupCoordinator
    with pytest.raises(kafka_errors.CommitFailedError):
        await c.commit_offsets(None, OFFSETS)
    assert (c.generation, c.member_id) == (-1, "")
    assert c._rejoin_needed_fut.done()
