"""Log starts and ends, asked on a connection of their own.

A consumer's one connection to a broker carries its fetches, and a broker answers the requests
of a connection one at a time: a ListOffsets sent behind a fetch that waits for records (up to
1.5 s) waits as long. Table recovery asks for the ends and starts of every changelog it
replays at each rebalance, so these go through a second aiokafka consumer in no group, at the
worker consumer's isolation level: under exactly_once a read_committed consumer's ListOffsets
answers the last stable offset, where a replay must end.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from aiokafka import TopicPartition
from faust.types import TP, AppT

from streamapp.runtime import clients
from streamapp.runtime.group.consumer import WorkerConsumer

logger = logging.getLogger(__name__)


class OffsetsReader:
    """Starts and ends of partitions, from the broker (see the module)."""

    def __init__(self, app: AppT) -> None:
        self.app = app
        self.client: WorkerConsumer | None = None

    async def start(self, transport: object) -> None:
        self.client = clients.offsets_reader(self.app, transport)
        await self.client.start()

    async def stop(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            await client.stop()

    async def ends(self, tps: Iterable[TP]) -> dict[TP, int]:
        """Each partition's end: its high watermark, under exactly_once its last stable offset."""
        wanted = [TopicPartition(tp.topic, tp.partition) for tp in tps]
        if not wanted or self.client is None:
            return {}
        found = await self.client.end_offsets(wanted)
        return {TP(tp.topic, tp.partition): int(offset) for tp, offset in found.items()}

    async def starts(self, tps: Iterable[TP]) -> dict[TP, int]:
        """Each partition's log start offset."""
        wanted = [TopicPartition(tp.topic, tp.partition) for tp in tps]
        if not wanted or self.client is None:
            return {}
        found = await self.client.beginning_offsets(wanted)
        return {TP(tp.topic, tp.partition): int(offset) for tp, offset in found.items()}
