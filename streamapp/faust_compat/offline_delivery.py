"""aiokafka's sender without a broker, for benchmarks of the send path (`bench/batch_outputs.py`).

`deliver` takes the producer's batches that are ready, as aiokafka's sender takes them
(``MessageAccumulator.drain_by_nodes``), and marks each delivered (``MessageBatch.done``, at
offsets counted per partition), which resolves their futures as a broker's answer would.
`run` does it whenever the accumulator wakes its sender (a batch is full). A worker never uses
this module.

aiokafka private name used (checked at import, `streamapp.faust_compat.PRIVATE_NAMES`):
``AIOKafkaProducer._message_accumulator``.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer


class OfflineDelivery:
    """Delivers a producer's batches, never started, without a broker."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.accumulator = producer._message_accumulator
        self.offsets: dict[Any, int] = {}

    def deliver(self) -> None:
        nodes, _ = self.accumulator.drain_by_nodes(ignore_nodes=set())
        for batches in nodes.values():
            for tp, batch in batches.items():
                offset = self.offsets.get(tp, 0)
                batch.done(offset)
                self.offsets[tp] = offset + batch.record_count

    async def run(self) -> None:
        while True:
            await self.accumulator.waiter()  # a batch is full: taken as the sender would
            self.deliver()
