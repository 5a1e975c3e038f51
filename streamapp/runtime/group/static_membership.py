"""Static membership (KIP-345) for the worker's consumer, made safe to stop and to fence.

A worker whose consumer has a ``group.instance.id`` (its client id, see
`streamapp.worker.use_static_membership`) is a static member: restarted within the session
timeout, it rejoins under that id and the broker hands it its old partitions back without a
rebalance, where a dynamic member would have left the group waiting for its dead predecessor's
session to time out. aiokafka 0.14 joins as one (JoinGroup v5, SyncGroup v3), and lacks two
things the coordinator here adds:

1. **A stop hands the partitions over at once.** aiokafka never sends a static member's
   LeaveGroup (``GroupCoordinator._maybe_leave_group``: the Java consumer's default, which
   expects a static member back within the session timeout). A worker stopped for good
   (Ctrl-C, SIGTERM: scale-in, a deploy that moves it) would then hold its partitions for the
   whole session timeout. Its coordinator now sends, as it closes (after it stopped
   heartbeating, before the consumer's connections close), a LeaveGroup v3 that names the
   member and its instance (KIP-345's form; aiokafka defines LeaveGroup v0-v1 only, so v3 is
   defined here). Kafka Streams offers the same on close (KIP-812, ``CloseOptions.leaveGroup``).
   A SIGKILL sends nothing, which is the point: the restart takes the place back. With
   ``leave_group_on_stop`` off (`streamapp.settings`), a stop sends nothing either, as aiokafka
   and Kafka Streams by default: a worker stopped and started again within the session timeout
   (a rolling restart) then takes its place back with no rebalance of the others, and one that
   stays down holds its partitions until its session times out.

2. **A worker whose instance id another worker took stops, once, with one line.** Two live
   workers with one client id (two data dirs given the same ``--client-id``; one data dir is
   locked to one worker) would join under one instance id. The broker lets the newer one take
   the older one's place and partitions, and answers the older one's requests that name the
   instance with FENCED_INSTANCE_ID. aiokafka's heartbeat (v0-v1) names no instance: the older
   one got UNKNOWN_MEMBER_ID instead, rejoined under the instance id, displaced the newer one,
   and so on, two workers taking one place in turn while both processed its partitions.
   Heartbeats are sent as v3 here, naming the instance, so the displaced worker learns it was
   fenced. A response with FENCED_INSTANCE_ID (which aiokafka does not know: an
   ``UnknownError`` to it) then stops the worker the way SIGTERM does, once, and
   `fenced_message` tells `streamapp worker` the line to exit with.

A worker cannot tell, as it starts, a live worker under its instance id from a crashed one whose
session has not timed out yet (both are a member with that instance id to the broker), so it
cannot refuse up front without refusing the restart after a crash that static membership is for.

aiokafka internals (listed in `streamapp.runtime.group.PRIVATE_NAMES`):
``GroupCoordinator._send_req`` (every request to the group's coordinator: a heartbeat sent as
v3, the answers read), ``_maybe_leave_group`` (what aiokafka does as the coordinator closes:
the LeaveGroup first), ``_closing``, ``_client`` (the LeaveGroup goes to the broker that took
the join) and ``_group_instance_id``.
Tests: tests/unit/streamapp/runtime/group/test_static_membership.py;
tests/integration/test_static_membership.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from aiokafka.client import ConnectionGroup
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.group import HeartbeatRequest, HeartbeatRequest_v0, HeartbeatRequest_v1
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

logger = logging.getLogger(__name__)

# aiokafka ships no type information: its protocol classes are Any to mypy, hence the ignores.

#: Kafka's API keys and error code this module speaks (Kafka's protocol, not aiokafka's names).
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
FENCED_INSTANCE_ID = 82
#: How long a stop waits for the broker to answer its LeaveGroup. A live broker answers at once;
#: an unreachable one would otherwise hold the stop for the consumer's request timeout (90 s
#: under Faust), and the session timeout ends the membership anyway.
LEAVE_TIMEOUT_S = 5.0
#: Requests that name the group instance (JoinGroup v5+, SyncGroup v3+, and the two below).
_NAMES_THE_INSTANCE = (JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP)


class LeaveGroupResponse_v3(Response):  # type: ignore[misc]
    API_KEY = LEAVE_GROUP
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class LeaveGroupRequest_v3(RequestStruct):  # type: ignore[misc]
    API_KEY = LEAVE_GROUP
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class StaticLeaveGroupRequest(Request[LeaveGroupRequest_v3]):  # type: ignore[misc]
    """LeaveGroup naming each member with its instance id (KIP-345); v3, the last non-flexible
    version (v4+ use compact encodings aiokafka's structs do not describe)."""

    API_KEY = LEAVE_GROUP

    def __init__(self, group: str, members: list[tuple[str, str]]) -> None:
        self.group = group
        self.members = members

    def build(self, request_struct_class: type[Any]) -> Any:
        return request_struct_class(self.group, self.members)


class HeartbeatResponse_v3(Response):  # type: ignore[misc]
    API_KEY = HEARTBEAT
    API_VERSION = 3
    SCHEMA = Schema(("throttle_time_ms", Int32), ("error_code", Int16))


class HeartbeatRequest_v3(RequestStruct):  # type: ignore[misc]
    API_KEY = HEARTBEAT
    API_VERSION = 3
    RESPONSE_TYPE = HeartbeatResponse_v3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("generation_id", Int32),
        ("member_id", String("utf-8")),
        ("group_instance_id", String("utf-8")),
    )


#: Ascending, as aiokafka's `Request` wants them (it sends the highest the broker takes).
_HeartbeatStruct = HeartbeatRequest_v0 | HeartbeatRequest_v1 | HeartbeatRequest_v3


class StaticHeartbeatRequest(Request[_HeartbeatStruct]):  # type: ignore[misc]
    """aiokafka's heartbeat, naming the instance where the broker takes v3 (Kafka 2.3+); a
    broker without v3 has no static membership either, and gets aiokafka's own versions."""

    API_KEY = HEARTBEAT

    def __init__(self, group: str, generation_id: int, member_id: str, instance_id: str) -> None:
        self.group = group
        self.generation_id = generation_id
        self.member_id = member_id
        self.instance_id = instance_id

    def build(self, request_struct_class: type[Any]) -> Any:
        if request_struct_class is HeartbeatRequest_v3:
            return HeartbeatRequest_v3(
                self.group, self.generation_id, self.member_id, self.instance_id
            )
        return request_struct_class(self.group, self.generation_id, self.member_id)


#: The line `streamapp worker` exits with after this process's consumer was fenced.
_fenced: str | None = None


def fenced_message() -> str | None:
    """Why this worker stopped, if the broker fenced its consumer's instance id; else None."""
    return _fenced


def stop_fenced_worker(message: str) -> None:
    """Stop this worker as SIGTERM does (commits, stores closed; Faust's own graceful stop),
    and remember the line it exits with. The signal reaches the worker's main loop from the
    consumer's thread, where a fencing is noticed."""
    global _fenced
    if _fenced is not None:
        return
    _fenced = message
    logger.warning("streamapp: the broker fenced this worker's group.instance.id: stopping")
    os.kill(os.getpid(), signal.SIGTERM)


class StaticMembership(GroupCoordinator):  # type: ignore[misc]
    """aiokafka's coordinator, whose static member leaves on a stop and stops once fenced
    (see the module docs). A coordinator without a group instance id is aiokafka's."""

    #: Whether a stop sends the LeaveGroup (``leave_group_on_stop``); set by the coordinator.
    _leave_group_on_stop = True
    #: The member id of the last JoinGroup that succeeded, and the broker that took it:
    #: aiokafka's coordinator may have forgotten the broker (marked dead) by the time it closes.
    _joined_as: tuple[str, int] | None = None
    #: Whether the broker answered FENCED_INSTANCE_ID.
    _fenced = False
    #: Called once, with the line to exit with, when the broker fenced this member; None:
    #: `stop_fenced_worker`.
    _fenced_handler: Callable[[str], None] | None = None

    def use_static_options(
        self, *, leave_group_on_stop: bool, on_fenced: Callable[[str], None] | None
    ) -> None:
        """What a stop does (LeaveGroup or not), and what a fencing does (by default: stop
        this worker, `stop_fenced_worker`)."""
        self._leave_group_on_stop = leave_group_on_stop
        self._fenced_handler = on_fenced

    async def _send_req(self, request: Any) -> Any:
        api_key = getattr(request, "API_KEY", None)
        instance_id = self._group_instance_id
        if instance_id is None or api_key not in _NAMES_THE_INSTANCE:
            return await super()._send_req(request)
        if isinstance(request, HeartbeatRequest):
            # aiokafka's builder keeps its fields to itself; its v1 struct names them.
            fields = request.prepare({HEARTBEAT: (1, 1)})
            request = StaticHeartbeatRequest(
                fields.group, fields.generation_id, fields.member_id, instance_id
            )
        node_id = self.coordinator_id
        response = await super()._send_req(request)
        if api_key == JOIN_GROUP and response.error_code == 0:
            self._joined_as = (response.member_id, node_id)
        if response.error_code == FENCED_INSTANCE_ID:
            if not self._fenced:
                self._fenced = True
                (self._fenced_handler or stop_fenced_worker)(
                    f"fenced: another worker joined group {self.group_id!r} as group.instance.id "
                    f"{instance_id!r} (this worker's client id) and took its place, so this "
                    "worker stopped; give each worker its own --client-id (two data dirs were "
                    "given the same one?)"
                )
            if isinstance(request, StaticHeartbeatRequest):
                # The worker is stopping already (on_fenced). Handed on, the answer is an
                # UnknownError to aiokafka's heartbeat task, which crashes the consumer thread
                # under the stop, and mode then logs a traceback stopping the crashed thread.
                # Until the stop is through, the heartbeat is told nothing is wrong.
                response.error_code = 0
        return response

    async def _maybe_leave_group(self) -> None:
        # aiokafka calls this as the coordinator closes (and when the consumer was idle past
        # its max poll interval, where a static member sends nothing, as before).
        if self._group_instance_id is not None and self._closing.done():
            await self._stop_membership(self._group_instance_id)
        await super()._maybe_leave_group()

    async def _stop_membership(self, instance_id: str) -> None:
        """Leave the group, or say why not (``leave_group_on_stop`` off), once."""
        joined, self._joined_as = self._joined_as, None
        if joined is None or self._fenced:
            return  # never joined, or its place is another worker's now
        if not self._leave_group_on_stop:
            logger.info(
                "streamapp: static member %s stopped without leaving the group "
                "(leave_group_on_stop off): started again within the session timeout, it "
                "takes its partitions back with no rebalance; otherwise they move once "
                "its session times out",
                instance_id,
            )
            return
        member_id, node_id = joined
        request = StaticLeaveGroupRequest(self.group_id, [(member_id, instance_id)])
        try:
            response = await asyncio.wait_for(
                self._client.send(node_id, request, group=ConnectionGroup.COORDINATION),
                LEAVE_TIMEOUT_S,
            )
        except Exception as exc:  # a stop goes on: the session timeout ends the membership
            logger.warning(
                "streamapp: LeaveGroup of static member %s failed (%r): its partitions move "
                "once its session times out",
                instance_id,
                exc,
            )
            return
        errors = [response.error_code, *(member[2] for member in response.members)]
        if any(errors):
            logger.warning(
                "streamapp: LeaveGroup of static member %s refused (error codes %s): its "
                "partitions move once its session times out",
                instance_id,
                errors,
            )
        else:
            logger.info("streamapp: static member %s left the group", instance_id)
