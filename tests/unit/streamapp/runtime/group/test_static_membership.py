"""Static membership on streamapp's coordinator, over a fake client: what goes out, what comes
back.

The broker's side (a restart without a rebalance, a LeaveGroup it accepts, a fencing) is in
tests/integration/test_static_membership.py; here, the requests built and the decisions made,
by the coordinator a worker's consumer builds (`Coordinator`), its aiokafka steps its own.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

import faust
import pytest
from aiokafka.client import ConnectionGroup
from aiokafka.cluster import ClusterMetadata
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest, JoinGroupResponse_v5
from aiokafka.protocol.metadata import MetadataRequest

from streamapp.runtime.group import static_membership
from streamapp.runtime.group.consumer import WorkerConsumer
from streamapp.runtime.group.coordinator import Coordinator
from streamapp.runtime.group.static_membership import (
    FENCED_INSTANCE_ID,
    HeartbeatRequest_v3,
    HeartbeatResponse_v3,
    LeaveGroupRequest_v3,
    LeaveGroupResponse_v3,
)
from streamapp.settings import StreamappSettings
from streamapp.worker import use_static_membership

#: What the broker takes, as its ApiVersions answer gives it (Kafka 3.9).
BROKER_VERSIONS = {11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 3: (0, 12)}
#: The broker that coordinates the group.
NODE = 3


class FakeClient:
    """An AIOKafkaClient's send and close: records the structs sent, answers from a script."""

    def __init__(self) -> None:
        self.cluster = ClusterMetadata()
        self.sent: list[tuple[int, Any, ConnectionGroup]] = []
        self.answers: dict[int, Any] = {}
        self.closed = False

    async def send(
        self, node_id: int, request: Any, *, group: ConnectionGroup = ConnectionGroup.DEFAULT
    ) -> Any:
        assert not self.closed, "sent after the client closed"
        struct = request.prepare(BROKER_VERSIONS)
        self.sent.append((node_id, struct, group))
        return self.answers[struct.API_KEY]

    async def close(self) -> None:
        self.closed = True


def _joined(member_id: str = "w1-abc") -> JoinGroupResponse_v5:
    return JoinGroupResponse_v5(0, 0, 7, "streamapp", "w2-def", member_id, [])


def _member(client: FakeClient, **options: Any) -> tuple[Coordinator, list[str]]:
    """A static member's coordinator of group myapp, instance w1, its broker known."""
    fenced: list[str] = []
    coordinator = Coordinator(
        client,
        SubscriptionState(),
        group_id="myapp",
        group_instance_id="w1",
        on_fenced=fenced.append,
        **options,
    )
    coordinator.coordinator_id = NODE
    return coordinator, fenced


async def _join(coordinator: Coordinator, client: FakeClient) -> None:
    client.answers[11] = _joined()
    await coordinator._send_req(JoinGroupRequest("myapp", 30000, 60000, "", "w1", "consumer", []))


async def test_a_heartbeat_names_the_instance() -> None:
    client = FakeClient()
    member, _ = _member(client)
    client.answers[12] = HeartbeatResponse_v3(0, 0)
    await member._send_req(HeartbeatRequest("myapp", 7, "w1-abc"))
    (node, struct, group) = client.sent[0]
    assert isinstance(struct, HeartbeatRequest_v3)
    assert (struct.group, struct.generation_id, struct.member_id) == ("myapp", 7, "w1-abc")
    assert struct.group_instance_id == "w1"
    assert (node, group) == (NODE, ConnectionGroup.COORDINATION)
    assert member._fenced is False
    await member.close()


async def test_other_requests_go_out_untouched() -> None:
    client = FakeClient()
    member, _ = _member(client)
    client.answers[3] = "metadata"
    assert await member._send_req(MetadataRequest(["t"])) == "metadata"
    assert client.sent[0][1].API_KEY == 3
    await member.close()


async def test_a_dynamic_member_s_heartbeat_is_aiokafkas() -> None:
    client = FakeClient()
    member = Coordinator(client, SubscriptionState(), group_id="myapp")
    member.coordinator_id = NODE
    client.answers[12] = HeartbeatResponse_v3(0, 0)
    await member._send_req(HeartbeatRequest("myapp", 7, "m-1"))
    assert not isinstance(client.sent[0][1], HeartbeatRequest_v3)
    await member.close()


async def test_a_stop_leaves_naming_member_and_instance_then_closes() -> None:
    client = FakeClient()
    consumer = WorkerConsumer(group_id="myapp", group_instance_id="w1")
    member, _ = _member(client)
    # The consumer's own parts, as its start would have built them: the coordinator, over
    # the client whose connections close last.
    consumer._client, consumer._coordinator = client, member
    await _join(member, client)
    client.answers[13] = LeaveGroupResponse_v3(0, 0, [("w1-abc", "w1", 0)])
    await consumer.stop()  # FakeClient refuses a send after its close
    node, struct, group = client.sent[-1]
    assert isinstance(struct, LeaveGroupRequest_v3)
    assert (struct.group, struct.members) == ("myapp", [("w1-abc", "w1")])
    assert (node, group) == (NODE, ConnectionGroup.COORDINATION)
    assert client.closed
    assert member._joined_as is None  # left: a second close sends nothing more
    await member.close()
    assert len(client.sent) == 2


async def test_a_stop_without_leave_group_on_stop_sends_nothing_and_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its place stays the worker's for the session timeout: a rolling restart within it
    causes no rebalance of the others."""
    client = FakeClient()
    member, _ = _member(client, leave_group_on_stop=False)
    await _join(member, client)
    caplog.set_level("INFO", logger=static_membership.__name__)
    await member.close()
    assert [struct.API_KEY for _, struct, _ in client.sent] == [11]  # the join only
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
    member, _ = _member(client)
    await member.close()
    assert client.sent == []

    client = FakeClient()
    member, _ = _member(client)
    await _join(member, client)
    client.answers[13] = LeaveGroupResponse_v3(0, 0, [("w1-abc", "w1", 25)])  # unknown member
    await member.close()
    assert member._closing.done()
    assert "refused (error codes [0, 25])" in caplog.text


async def test_a_fenced_answer_stops_once_and_sends_no_leave() -> None:
    client = FakeClient()
    member, fenced = _member(client)
    await _join(member, client)
    client.answers[12] = HeartbeatResponse_v3(0, FENCED_INSTANCE_ID)
    for _ in range(3):
        answer = await member._send_req(HeartbeatRequest("myapp", 7, "w1-abc"))
        assert answer.error_code == 0  # the heartbeat task is told nothing is wrong
    assert len(fenced) == 1
    assert fenced[0].startswith("fenced: another worker joined group 'myapp' as group.instance.id")
    assert "--client-id" in fenced[0] and "\n" not in fenced[0]
    sent = len(client.sent)
    await member.close()
    assert len(client.sent) == sent  # its place is another worker's now
    assert member._fenced


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
