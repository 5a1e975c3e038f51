"""streamapp.faust_compat.static_membership on a fake client: what goes out, what comes back.

The broker's side (a restart without a rebalance, a LeaveGroup it accepts, a fencing) is in
tests/integration/test_static_membership.py; here, the requests built and the decisions made.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

import faust
import pytest
from aiokafka.client import ConnectionGroup
from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest, JoinGroupResponse_v5
from aiokafka.protocol.metadata import MetadataRequest

from streamapp.faust_compat import static_membership
from streamapp.faust_compat.static_membership import (
    FENCED_INSTANCE_ID,
    HeartbeatRequest_v3,
    HeartbeatResponse_v3,
    LeaveGroupRequest_v3,
    LeaveGroupResponse_v3,
    StaticMember,
)
from streamapp.settings import StreamappSettings
from streamapp.worker import use_static_membership

#: What the broker takes, as its ApiVersions answer gives it (Kafka 3.9).
BROKER_VERSIONS = {11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 3: (0, 12)}


class FakeClient:
    """An AIOKafkaClient's send and close: records the structs sent, answers from a script."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, Any, ConnectionGroup]] = []
        self.answers: dict[int, Any] = {}
        self.closed = False

    async def send(
        self, node_id: int, request: Any, *, group: ConnectionGroup = ConnectionGroup.DEFAULT
    ) -> Any:
        struct = request.prepare(BROKER_VERSIONS)
        self.sent.append((node_id, struct, group))
        return self.answers[struct.API_KEY]

    async def close(self) -> None:
        self.closed = True


def _joined(member_id: str = "w1-abc") -> JoinGroupResponse_v5:
    return JoinGroupResponse_v5(0, 0, 7, "streamapp", "w2-def", member_id, [])


def _member(client: FakeClient) -> tuple[StaticMember, list[str]]:
    fenced: list[str] = []
    return StaticMember(client, "myapp", "w1", on_fenced=fenced.append), fenced


async def test_a_heartbeat_names_the_instance() -> None:
    client = FakeClient()
    member, _ = _member(client)
    client.answers[12] = HeartbeatResponse_v3(0, 0)
    await client.send(3, HeartbeatRequest("myapp", 7, "w1-abc"), group=ConnectionGroup.COORDINATION)
    (node, struct, group) = client.sent[0]
    assert isinstance(struct, HeartbeatRequest_v3)
    assert (struct.group, struct.generation_id, struct.member_id) == ("myapp", 7, "w1-abc")
    assert struct.group_instance_id == "w1"
    assert (node, group) == (3, ConnectionGroup.COORDINATION)
    assert member.fenced is False


async def test_other_requests_go_out_untouched() -> None:
    client = FakeClient()
    _member(client)
    client.answers[3] = "metadata"
    assert await client.send(1, MetadataRequest(["t"])) == "metadata"
    assert client.sent[0][1].API_KEY == 3


async def test_a_stop_leaves_naming_member_and_instance_then_closes() -> None:
    client = FakeClient()
    member, _ = _member(client)
    client.answers[11] = _joined()
    request = JoinGroupRequest("myapp", 30000, 60000, "", "w1", "consumer", [])
    await client.send(3, request, group=ConnectionGroup.COORDINATION)
    client.answers[13] = LeaveGroupResponse_v3(0, 0, [("w1-abc", "w1", 0)])
    await client.close()
    node, struct, group = client.sent[-1]
    assert isinstance(struct, LeaveGroupRequest_v3)
    assert (struct.group, struct.members) == ("myapp", [("w1-abc", "w1")])
    assert (node, group) == (3, ConnectionGroup.COORDINATION)
    assert client.closed
    assert member.member_id is None  # left: a second close sends nothing more
    await client.close()
    assert len(client.sent) == 2


async def test_a_stop_without_leave_group_on_stop_sends_nothing_and_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its place stays the worker's for the session timeout: a rolling restart within it
    causes no rebalance of the others."""
    client = FakeClient()
    StaticMember(client, "myapp", "w1", leave_on_stop=False)
    client.answers[11] = _joined()
    request = JoinGroupRequest("myapp", 30000, 60000, "", "w1", "consumer", [])
    await client.send(3, request, group=ConnectionGroup.COORDINATION)
    caplog.set_level("INFO", logger=static_membership.__name__)
    await client.close()
    assert [struct.API_KEY for _, struct, _ in client.sent] == [11]  # the join only
    assert client.closed
    assert "static member w1 stopped without leaving the group" in caplog.text


async def test_the_leave_is_v3_on_the_wire() -> None:
    struct = static_membership.StaticLeaveGroupRequest("g", [("m", "i")]).prepare({13: (0, 5)})
    assert struct.API_VERSION == 3
    assert struct.encode() == b"\x00\x01g" + b"\x00\x00\x00\x01" + b"\x00\x01m" + b"\x00\x01i"
    # The response v3 decodes its per-member errors.
    raw = b"\x00\x00\x00\x00" + b"\x00\x00" + b"\x00\x00\x00\x01\x00\x01m\x00\x01i\x00\x52"
    response = LeaveGroupResponse_v3.decode(BytesIO(raw))
    assert response.members == [("m", "i", FENCED_INSTANCE_ID)]


async def test_no_leave_before_a_join_and_a_refused_one_still_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = FakeClient()
    _member(client)
    await client.close()
    assert client.sent == [] and client.closed

    client = FakeClient()
    _member(client)
    client.answers[11] = _joined()
    await client.send(3, JoinGroupRequest("myapp", 30000, 60000, "", "w1", "consumer", []))
    client.answers[13] = LeaveGroupResponse_v3(0, 0, [("w1-abc", "w1", 25)])  # unknown member
    await client.close()
    assert client.closed
    assert "refused (error codes [0, 25])" in caplog.text


async def test_a_fenced_answer_stops_once_and_sends_no_leave() -> None:
    client = FakeClient()
    member, fenced = _member(client)
    client.answers[11] = _joined()
    await client.send(3, JoinGroupRequest("myapp", 30000, 60000, "", "w1", "consumer", []))
    client.answers[12] = HeartbeatResponse_v3(0, FENCED_INSTANCE_ID)
    for _ in range(3):
        await client.send(3, HeartbeatRequest("myapp", 7, "w1-abc"))
    assert len(fenced) == 1
    assert fenced[0].startswith("fenced: another worker joined group 'myapp' as group.instance.id")
    assert "--client-id" in fenced[0] and "\n" not in fenced[0]
    sent = len(client.sent)
    await client.close()
    assert len(client.sent) == sent and client.closed  # its place is another worker's now
    assert member.fenced


def test_the_instance_id_is_the_client_id_unless_the_app_sets_one() -> None:
    app = faust.App("static-unit", broker="kafka://127.0.0.1:1")
    use_static_membership(app, StreamappSettings(client_id="w1"))  # on by default
    assert app.conf.consumer_group_instance_id == "w1"

    own = faust.App("static-unit", broker="kafka://127.0.0.1:1", consumer_group_instance_id="x")
    use_static_membership(own, StreamappSettings(client_id="w1"))
    assert own.conf.consumer_group_instance_id == "x"

    off = faust.App("static-unit", broker="kafka://127.0.0.1:1")
    use_static_membership(off, StreamappSettings(client_id="w1", static_membership=False))
    assert off.conf.consumer_group_instance_id is None
