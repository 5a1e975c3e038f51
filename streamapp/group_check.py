"""Before a worker joins: is its consumer group run by workers of another assignor?

A Kafka group speaks one protocol. streamapp members offer only ``streamapp``; a
group already run by stock Faust workers (protocol ``faust``) or plain consumers
refuses them at JoinGroup with the broker's InconsistentGroupProtocolError, which
aiokafka reports as a fatal error that says nothing about what to do. Asking the
broker first (DescribeGroups) lets the worker name the cause and the way out.
The other direction, a stock-Faust worker joining a streamapp group, is refused
by the broker the same way; that worker runs Faust's code, so its log carries
the broker's error (see README, "Moving an app from stock Faust").
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

logger = logging.getLogger(__name__)

__all__ = ["ForeignGroup", "find_foreign_group", "foreign_group_message"]


@dataclass(frozen=True)
class ForeignGroup:
    group_id: str
    protocol: str
    members: int


def foreign_group_message(found: ForeignGroup, ours: str) -> str:
    who = "stock Faust worker" if found.protocol == "faust" else "consumer"
    plural = "" if found.members == 1 else "s"
    return (
        f"consumer group {found.group_id!r} is run by {found.members} {who}{plural} using "
        f"assignor protocol {found.protocol!r}, not {ours!r}, so the broker would refuse this "
        "worker. "
        "Stop those workers first (a group cannot mix assignors; migrate all workers of "
        "the app to `streamapp worker` at once), or give this app another id"
    )


async def find_foreign_group(
    bootstrap: str, group_id: str, ours: str, *, timeout_s: float = 10.0
) -> ForeignGroup | None:
    """The group, if live members of it use a protocol other than ``ours``.

    ``None`` when the group is empty, unknown, ours, or the broker cannot be
    asked: the worker then starts as usual and Faust reports a broker it
    cannot reach in its own way.
    """
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000)
    )
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
        responses = await asyncio.wait_for(admin.describe_consumer_groups([group_id]), timeout_s)
    except (TimeoutError, KafkaError, OSError) as exc:
        logger.debug("streamapp: could not describe group %r: %r", group_id, exc)
        return None
    finally:
        await admin.close()
    for response in responses:
        for error_code, gid, _state, protocol_type, protocol, members, *_ in response.groups:
            if error_code or gid != group_id or protocol_type != "consumer":
                continue
            if members and protocol and protocol != ours:
                return ForeignGroup(gid, protocol, len(members))
    return None
