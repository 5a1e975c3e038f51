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

import logging
from dataclasses import dataclass

from streamapp.ops.group_read import BrokerUnavailable, describe_group
from streamapp.ops.group_view import GroupViewError

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
    try:
        group = await describe_group(bootstrap, group_id, timeout_s=timeout_s)
    except (BrokerUnavailable, GroupViewError) as exc:
        logger.debug("streamapp: could not describe group %r: %s", group_id, exc)
        return None
    if group.protocol_type != "consumer" or not group.members:
        return None
    if group.protocol and group.protocol != ours:
        return ForeignGroup(group.group_id, group.protocol, len(group.members))
    return None
