"""The worker's Kafka producer: aiokafka's ``AIOKafkaProducer``, with what a worker needs of it.

- a send to a partition the producer's metadata does not have waits for it instead of raising
  (`streamapp.runtime.producer.partition_wait`);
- its sender's metadata refreshes are spaced by its retry backoff
  (`streamapp.runtime.producer.refresh_spacing`);
- aiokafka's log of it says a broker outage in two lines (`streamapp.runtime.client_log`);
- a flush sends the open batches at once, as Kafka's Java producer's does, rather than waiting
  out their linger (aiokafka's waits for them to be sent as they would be).

Everything else is aiokafka's. Only streamapp's producers are built from this class: aiokafka's
``AIOKafkaProducer``, and every other producer in the process, behave as aiokafka documents.
Tests: tests/unit/streamapp/runtime/producer/; tests/integration/test_stock_clients.py.
"""

from __future__ import annotations

from typing import Any

import aiokafka

from streamapp.runtime.client_log import ClientLog
from streamapp.runtime.producer.partition_wait import known, wait_for_partition
from streamapp.runtime.producer.refresh_spacing import space_sender_refreshes


class WorkerProducer(aiokafka.AIOKafkaProducer):  # type: ignore[misc]
    """aiokafka's producer, whose sends wait for a partition missing from its metadata and
    whose sender's metadata refreshes are a backoff apart. Built with aiokafka's own keyword
    arguments; its ``client_id`` names it in its log lines, as in the broker's."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        client_id = options.get("client_id") or "aiokafka-producer"
        self.client_log = ClientLog("producer", client_id)

    async def start(self) -> None:
        space_sender_refreshes(self)
        with self.client_log.scope():
            await super().start()

    async def stop(self) -> None:
        with self.client_log.scope():
            await super().stop()
        self.client_log.close()

    async def flush(self) -> None:
        """Every record sent so far delivered: the open batches are closed and sent now, not
        after their linger (``producer_linger``, 50 ms under exactly_once), then waited for.

        A commit flushes first (at-least-once: before the offsets; exactly_once: into the
        transactions, with nothing handed out meanwhile), so a flush that waited out the
        linger held every commit that long. aiokafka closes the batches the same way as a
        transaction commits (``flush_for_commit``); a record sent after this goes in a new
        batch."""
        await self._message_accumulator.flush_for_commit()

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Any = None,
    ) -> Any:
        """aiokafka's send, after the wait for a partition the metadata does not have yet."""
        # Known almost always: tested here, without a coroutine per send to find it out.
        if partition is not None and not known(self, topic, partition):
            await wait_for_partition(self, topic, partition)
        return await super().send(
            topic, value, key=key, partition=partition, timestamp_ms=timestamp_ms, headers=headers
        )
