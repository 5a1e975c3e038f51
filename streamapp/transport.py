"""Faust's aiokafka transport, except that the worker's consumer always runs our assignor.

Faust's ``AIOKafkaConsumerThread._create_worker_consumer`` hands aiokafka the app's assignor only
when the app has changelog tables or standby replicas, and aiokafka's round robin otherwise. A
streamapp group must speak one protocol whatever each app defines (a worker with round robin
would be refused by the group, or would ignore co-partitioning and stickiness), so the choice is
overridden here after Faust built the consumer (it is not started yet, so nothing used it).
"""

from __future__ import annotations

from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        if self._assignor is not self.app.assignor:
            self._assignor = self.app.assignor
            # aiokafka 0.14 reads this in start() to build its GroupCoordinator.
            consumer._partition_assignment_strategy = [self._assignor]
        return consumer


class Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer
