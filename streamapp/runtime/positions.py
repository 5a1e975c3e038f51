"""Where a gained source partition starts: its committed offset, or where ``auto_offset_reset``
says when it has none.

aiokafka's ``seek_to_committed`` moves only partitions with a committed offset above 0: one with
none (a new group) kept the position records fetched before the rebalance had given it, and
those records were never processed by anyone. Here a partition without a committed offset goes
where a consumer without one starts (the log's start or end, as ``auto_offset_reset`` says), and
one committed at 0 is sought to 0.

A committed offset below the partition's log start means records were deleted (retention,
DeleteRecords) before the group read them: aiokafka resets such a partition to the log start
with one INFO line, and the records are lost to the group without a word. They are named here in
one WARNING.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

logger = logging.getLogger(__name__)

#: How long the check for deleted records may take: a diagnostic, never a reason to hold a
#: rebalance up.
LOG_STARTS_TIMEOUT_S = 5.0


def deleted_before_read(
    committed: Mapping[Any, int | None], log_starts: Mapping[Any, int]
) -> dict[Any, tuple[int, int]]:
    """Partitions whose committed offset lies below their log start:
    ``tp -> (committed, start)``."""
    lost: dict[Any, tuple[int, int]] = {}
    for tp, offset in committed.items():
        start = log_starts.get(tp)
        if offset is not None and offset >= 0 and start is not None and offset < start:
            lost[tp] = (offset, start)
    return lost


async def seek_to_committed(
    consumer: AIOKafkaConsumer, partitions: Iterable[TopicPartition], reset: str
) -> dict[TopicPartition, int | None]:
    """Seek ``partitions`` to their committed offsets, or by ``reset`` where none is; returns
    each one's committed offset (None: none)."""
    wanted = sorted(partitions)
    if not wanted:
        return {}
    committed: dict[TopicPartition, int | None] = await consumer.seek_to_committed(*wanted)
    unset = []
    for tp, offset in committed.items():
        if offset == 0:
            consumer.seek(tp, 0)
        elif offset is None or offset < 0:
            unset.append(tp)
    await _warn_deleted_before_read(
        consumer, {tp: offset for tp, offset in committed.items() if offset is not None}
    )
    if unset and reset == "earliest":
        await consumer.seek_to_beginning(*unset)
    elif unset and reset == "latest":
        await consumer.seek_to_end(*unset)
    return committed


async def _warn_deleted_before_read(
    consumer: AIOKafkaConsumer, committed: Mapping[TopicPartition, int]
) -> None:
    if not committed:
        return
    try:
        starts = await asyncio.wait_for(
            consumer.beginning_offsets(list(committed)), LOG_STARTS_TIMEOUT_S
        )
    except (KafkaError, TimeoutError) as exc:
        logger.debug("log starts not read, no check for deleted records: %r", exc)
        return
    for tp, (offset, start) in sorted(deleted_before_read(committed, starts).items()):
        logger.warning(
            "streamapp: %s[%d]: records %d to %d were deleted (retention or DeleteRecords) "
            "before this group read them: they are not processed; the partition goes on "
            "from %d",
            tp.topic,
            tp.partition,
            offset,
            start - 1,
            start,
        )
