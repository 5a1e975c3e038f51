"""Faust's aiokafka transport, with two fixes streamapp depends on.

1. The worker's consumer always runs our assignor. Faust's
   ``AIOKafkaConsumerThread._create_worker_consumer`` hands aiokafka the app's assignor only when
   the app has changelog tables or standby replicas, and aiokafka's round robin otherwise. A
   streamapp group must speak one protocol whatever each app defines (a worker with round robin
   would be refused by the group, or would ignore co-partitioning and stickiness), so the choice
   is overridden after Faust built the consumer (it is not started yet, so nothing used it).

2. Highwaters under exactly_once come from the broker. Faust reads them from
   ``last_stable_offset``, which aiokafka only learns from a fetch response and reports as -1
   before one; table recovery then takes -1 for the end of a changelog it has not fetched yet
   and fails its consistency check. A ListOffsets request made by a read_committed consumer
   (Faust's consumer is one under exactly_once) answers with the last stable offset itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        if self._assignor is not self.app.assignor:
            self._assignor = self.app.assignor
            # aiokafka 0.14 reads this in start() to build its GroupCoordinator.
            consumer._partition_assignment_strategy = [self._assignor]
        return consumer

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        # end_offsets honours the consumer's isolation level: the LSO under read_committed.
        ends = await self._ensure_consumer().end_offsets(partitions)
        return {TP(tp.topic, tp.partition): offset for tp, offset in ends.items()}


class Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def all_progress_committed(self) -> bool:
        """Whether every input this worker processed is covered by a commit, none in flight.

        Asked once the consumer stopped: its last commit may have failed (Faust logs that and
        carries on), and only then do acked offsets remain past the committed ones.
        """
        if self._unacked_messages:
            return False
        return not self._filter_committable_offsets(list(self._acked))


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer
