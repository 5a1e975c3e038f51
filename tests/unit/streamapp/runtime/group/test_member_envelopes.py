"""A subscription envelope aiokafka's leader cannot decode is handed to streamapp's assignor.

A Kafka 4.x broker passes such an envelope to the leader as it is (3.9.1 throws on it before
any leader sees it); aiokafka's own decoding raised out of the rebalance and crashed the leader.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from assignor.metadata_codec import MetadataError, decode_metadata
from streamapp.runtime.group.member_envelopes import ReadableEnvelopes, readable_members

# Bytes 2-5 (the topic count) say 5, then a topic name length past the end: aiokafka raises.
UNDERRUN = b"\x00\x00\x00\x00\x00\x05\x7f\xff" + b"x" * 8
# A topic count with its top bit set: a null list, which aiokafka decodes to None.
NULL_TOPICS = b"\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00"


def test_undecodable_envelopes_become_no_topics_and_their_bytes_as_user_data() -> None:
    good = ConsumerProtocolMemberMetadata(4, ["t"], b"SA\x01...").encode()
    members = [("m-good", good), ("m-under", None, UNDERRUN), ("m-null", NULL_TOPICS)]
    out = readable_members(members)
    assert out[0] == ("m-good", good)  # a readable envelope is passed as it came
    for (member_id, *_, envelope), raw, expected_id in (
        (out[1], UNDERRUN, "m-under"),
        (out[2], NULL_TOPICS, "m-null"),
    ):
        assert member_id == expected_id
        decoded = ConsumerProtocolMemberMetadata.decode(envelope)
        assert decoded.subscription == [] and decoded.user_data == raw
    assert len(out[1]) == 3  # the group instance id kept its place


def test_streamapp_cannot_read_what_was_rewritten() -> None:
    ((_, envelope),) = readable_members([("m", UNDERRUN)])
    user_data = ConsumerProtocolMemberMetadata.decode(envelope).user_data
    try:
        decode_metadata(user_data)
    except MetadataError:
        return
    raise AssertionError("random bytes decoded as streamapp metadata")


class AiokafkaLeader(GroupCoordinator):  # type: ignore[misc]
    """aiokafka's leader step, a stand-in: it decodes every member's envelope as aiokafka's."""

    def __init__(self) -> None:
        self.decoded: list[Any] = []

    async def _perform_assignment(self, response: Any) -> dict[str, Any]:
        for *_, envelope in response.members:
            self.decoded.append(ConsumerProtocolMemberMetadata.decode(envelope).subscription)
        return {}


class Leader(ReadableEnvelopes, AiokafkaLeader):
    pass


async def test_the_leader_step_reads_what_it_is_given_after_the_rewrite() -> None:
    good = ConsumerProtocolMemberMetadata(4, ["t"], b"SA\x01...").encode()
    leader = Leader()
    response = SimpleNamespace(members=[("m-good", good), ("m-under", UNDERRUN)])
    await leader._perform_assignment(response)
    assert leader.decoded == [["t"], []]  # aiokafka's decoding raised on the second before
