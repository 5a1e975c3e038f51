"""A member's subscription the leader cannot decode reads as one with no topics: no crash.

A Kafka 4.x broker (its group coordinator rewritten, KIP-848) does not parse a member's
subscription as it completes the join: it logs a WARN and hands the bytes to the leader as they
are. aiokafka's leader decodes every member's subscription before any assignor runs
(``_perform_assignment``), and bytes it cannot decode (a length past the end: ``Buffer underrun
decoding Bytes``; a null topic list) raised out of the rebalance and crashed the leader, seen
on 4.4.0, depending on the bytes. (A Kafka 3.9 broker throws on such a subscription itself and
answers the join with an error: `streamapp.runtime.group.join_answers`.)

So the leader reads a subscription aiokafka cannot decode as one with no topics whose user data
is the raw bytes: streamapp's assignor then finds metadata it cannot read, gives that member no
partitions and says so once, as for any member it cannot read, and the group goes on.

aiokafka internals (listed in `streamapp.runtime.group.PRIVATE_NAMES`):
``GroupCoordinator._perform_assignment`` (the leader's step; the ``members`` of the JoinGroup
response it is given are rewritten first).
Tests: tests/unit/streamapp/runtime/group/test_member_envelopes.py;
tests/integration/test_join_group_errors.py, test_rogue_members.py.
"""

from __future__ import annotations

from typing import Any

from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.coordinator.protocol import ConsumerProtocol, ConsumerProtocolMemberMetadata


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


class ReadableEnvelopes(GroupCoordinator):  # type: ignore[misc]
    """aiokafka's coordinator, whose leader hands undecodable subscriptions to the assignor."""

    async def _perform_assignment(self, response: Any) -> Any:
        response.members = readable_members(list(response.members))
        return await super()._perform_assignment(response)
