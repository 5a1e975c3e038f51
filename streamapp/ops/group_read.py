"""What `streamapp group` asks the broker: one group's description, end offsets, partition counts.

The answers go to `streamapp.ops.group_view`, which decides nothing by I/O.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from streamapp import topic_check
from streamapp.ops.group_view import (
    DescribedGroup,
    GroupView,
    GroupViewError,
    RawMember,
    changelog_topics,
    read_group,
)

#: Bound on each request: a broker that does not answer is one line, not a hang.
REQUEST_TIMEOUT_S = 15.0


class BrokerUnavailable(RuntimeError):
    """The broker could not be asked; the message says which address and why."""


async def describe_group(
    bootstrap: str, group_id: str, *, timeout_s: float = REQUEST_TIMEOUT_S
) -> DescribedGroup:
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000)
    )
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
        # One group per request: aiokafka 0.14 decodes a DescribeGroups v3 response of two or
        # more groups with the v2 class and fails.
        responses = await asyncio.wait_for(admin.describe_consumer_groups([group_id]), timeout_s)
    except (TimeoutError, KafkaError, OSError) as exc:
        raise BrokerUnavailable(f"broker {bootstrap} did not describe the group: {exc!r}") from None
    finally:
        await admin.close()
    for response in responses:
        for error_code, gid, state, protocol_type, protocol, members, *_ in response.groups:
            if gid != group_id:
                continue
            if error_code:
                raise GroupViewError(
                    f"the broker refused to describe group {group_id!r} (error code {error_code})"
                )
            return DescribedGroup(
                group_id=gid,
                state=state,
                protocol_type=protocol_type,
                protocol=protocol,
                members=[RawMember(*member) for member in members],
            )
    raise GroupViewError(f"consumer group {group_id!r} does not exist on this broker")


async def end_offsets(
    bootstrap: str, topics: dict[str, int], *, timeout_s: float = REQUEST_TIMEOUT_S
) -> dict[str, dict[int, int]]:
    """topic -> partition -> end offset, for every partition of ``topics`` (name -> count)."""
    tps = [TopicPartition(t, p) for t, n in sorted(topics.items()) for p in range(n)]
    if not tps:
        return {}
    # No group id: reading end offsets joins no group and commits nothing.
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000)
    )
    try:
        await asyncio.wait_for(consumer.start(), timeout_s)
        ends = await asyncio.wait_for(consumer.end_offsets(tps), timeout_s)
    except (TimeoutError, KafkaError, OSError) as exc:
        raise BrokerUnavailable(f"broker {bootstrap} did not give end offsets: {exc!r}") from None
    finally:
        await consumer.stop()
    out: dict[str, dict[int, int]] = {}
    for tp, end in ends.items():
        out.setdefault(tp.topic, {})[tp.partition] = end
    return out


async def read_live_group(bootstrap: str, group_id: str) -> tuple[GroupView, dict[str, int]]:
    """The decoded group with its changelogs' end offsets, and every subscribed topic's count."""
    described = await describe_group(bootstrap, group_id)
    view = read_group(described)  # refuses a group streamapp does not run, before more I/O
    changelogs = changelog_topics(view)
    wanted = {t for m in view.members for t in m.subscription} | changelogs
    try:
        counts = await topic_check.read_partition_counts(bootstrap, wanted)
    except topic_check.TopicCheckError as exc:
        raise BrokerUnavailable(str(exc)) from None
    ends = await end_offsets(bootstrap, {t: n for t, n in counts.items() if t in changelogs})
    return read_group(described, ends), counts
