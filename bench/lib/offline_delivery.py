"""aiokafka's sender without a broker, for benchmarks of the send path (`bench/batch_outputs.py`).

`deliver` takes the producer's batches that are ready, as aiokafka's sender takes them
(``MessageAccumulator.drain_by_nodes``), and marks each delivered (``MessageBatch.done``, at
offsets counted per partition), which resolves their futures as a broker's answer would.
`run` does it whenever the accumulator wakes its sender (a batch is full). A worker never uses
this module: it lives with the benchmarks.

The aiokafka private name it uses, ``AIOKafkaProducer._message_accumulator``, is listed in
`PRIVATE_NAMES` and checked as this module is imported, against the aiokafka releases in
`AIOKAFKA_RELEASES` (`streamapp.runtime.library_check`); a unit test reads this module for
every private name it uses (tests/unit/bench/test_offline_delivery.py).
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer

from streamapp.runtime import library_check

#: The aiokafka releases this module was checked against: ``>=0.14,<0.15``.
AIOKAFKA_RELEASES: library_check.Ranges = {"aiokafka": ((0, 14), (0, 15))}

#: ``module:Class`` -> the aiokafka internals this module reads on it (or on an instance of it).
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "aiokafka.producer.producer:AIOKafkaProducer": (
        "_message_accumulator",  # its batches, taken as its sender takes them
    ),
}

library_check.check("bench.lib.offline_delivery", PRIVATE_NAMES, AIOKAFKA_RELEASES)


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
