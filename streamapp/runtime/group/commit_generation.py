"""A commit refused for an older generation leaves the member's newer generation alone.

An OffsetCommit answered ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID resets the member's generation
and member id only if they are still the ones the commit was sent with, as Java's
ConsumerCoordinator does. A member that keeps processing through a cooperative join commits
under the generation it had; once the JoinGroup answer gave it the next one, the broker refuses
that commit, and aiokafka reset the new generation too: the member rejoined under a new member
id, and the group rebalanced once or more again for nothing. The commit still fails (its
offsets are committed again under the new generation); the membership it no longer describes
is left alone.

aiokafka internals (listed in `streamapp.runtime.group.PRIVATE_NAMES`):
``GroupCoordinator._do_commit_offsets``, which builds its request from ``generation`` and
``member_id`` before its first await, and ``reset_generation`` (public), told apart per commit
by a context variable (each commit runs in a task of its own, under aiokafka's
``asyncio.shield``).
Delete when aiokafka compares the generation before it resets it.
Test: tests/unit/streamapp/runtime/group/test_commit_generation.py.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

from aiokafka.consumer.group_coordinator import GroupCoordinator

logger = logging.getLogger(__name__)

#: (generation, member id) an OffsetCommit of the current task was sent with; None outside one.
_commit_sent_as: contextvars.ContextVar[tuple[int, str] | None] = contextvars.ContextVar(
    "streamapp_commit_sent_as", default=None
)


class GenerationKeepingCommits(GroupCoordinator):  # type: ignore[misc]
    """aiokafka's coordinator, whose refused commits reset only the membership they were for."""

    async def _do_commit_offsets(self, assignment: Any, offsets: Any) -> Any:
        # aiokafka reads both into the request before its first await: these are what it sends.
        token = _commit_sent_as.set((self.generation, self.member_id))
        try:
            return await super()._do_commit_offsets(assignment, offsets)
        finally:
            _commit_sent_as.reset(token)

    def reset_generation(self) -> None:
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
        super().reset_generation()
