"""The base of `streamapp.App`: Faust's App with its producer start replaced."""

from __future__ import annotations

from typing import Any

import faust
from faust.types import ProducerT
from mode.utils.futures import stampede

from streamapp.faust_compat import (
    coordinator,
    producer_metadata,
    producer_wait,
    store_offsets,
    store_revoke,
)


class FaustApp(faust.App):
    def __init__(self, id: str, **options: Any) -> None:
        # Before any table creates its store: revoked stores are closed off the event loop,
        # with no garbage collection (`store_revoke`). Faust's revocation stopped every
        # partition a worker kept, at each rebalance.
        store_revoke.install()
        # The offset of every store open here, noted as it is written: the join metadata
        # reads those instead of opening each store again (`store_offsets`).
        store_offsets.install()
        # The group coordinator survives error answers to JoinGroup and SyncGroup
        # (`coordinator`), a write to a partition the producer does not know waits for it
        # (`producer_wait`), and the producer's sender waits a backoff between its metadata
        # refreshes (`producer_metadata`).
        coordinator.install()
        producer_wait.install()
        producer_metadata.install()
        super().__init__(id, **options)

    async def maybe_start_producer(self) -> ProducerT:
        """Faust's, without its three event-loop round trips on every call.

        Faust runs this for every record it produces (table changelogs included), behind
        `mode.utils.futures.stampede`, which yields to the event loop three times per call
        even when the producer runs already; Faust's producer buffer sends its records one
        at a time, so those round trips bounded how fast table writes reached Kafka. Once
        the producer has started, the answer is known without waiting for anything.
        """
        if self.in_transaction:
            return self.consumer.transactions
        producer = self.producer
        if producer.started:
            return producer
        return await self._start_producer()

    # Faust's body (``__wrapped__`` under its stampede), stampede-protected under its own name:
    # `stampede` caches its wrapper in the instance's __dict__ by the function's name, which
    # must not shadow the method above.
    async def _start_producer(self) -> ProducerT:
        return await faust.App.maybe_start_producer.__wrapped__(self)  # type: ignore[no-any-return]

    _start_producer = stampede(_start_producer)
