"""The base of `streamapp.App`: Faust's App with its transport and producer start replaced."""

from __future__ import annotations

import faust
from faust.types import TP, ProducerT, TransportT
from mode.utils.futures import stampede
from mode.utils.objects import cached_property
from mode.utils.queues import FlowControlEvent

from streamapp.faust_compat import (
    dropped_records,
    incremental,
)
from streamapp.faust_compat.transport import Transport


class FaustApp(faust.App):
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

    def _new_transport(self) -> TransportT:
        # Faust's, with streamapp's fixes (`transport`) and the worker's own Kafka clients
        # (`worker_clients`). As faust.App._new_transport: every consumer broker URL.
        return Transport(self.conf.broker_consumer, self)

    @cached_property
    def flow_control(self) -> FlowControlEvent:
        # Faust's, but resuming a flow that was never suspended keeps the streams' queues
        # while an incremental rebalance is handled (see `incremental`), and the records its
        # clear drops from the queues stop counting as handed out (`dropped_records`).
        return dropped_records.UntrackingFlowControl(loop=self.loop, consumer=lambda: self.consumer)

    def on_rebalance_return(self) -> None:
        super().on_rebalance_return()
        incremental.handler(self).on_rebalance_return()

    async def _on_partitions_revoked(self, revoked: set[TP]) -> None:
        if self.should_stop or not incremental.incremental_join(self):
            incremental.handler(self).keep_queues(False)
            await super()._on_partitions_revoked(revoked)
            return
        try:
            await incremental.handler(self).on_partitions_revoked(set(revoked))
        except Exception as exc:
            await self.crash(exc)

    async def _on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
        if self.should_stop or not incremental.incremental_join(self):
            incremental.handler(self).eager_pending = True
            await super()._on_partitions_assigned(assigned, generation_id)
            return
        self.unassigned = not assigned
        # Faust private: the assignment it compares the next one with.
        revoked, newly_assigned = self._update_assignment(assigned)
        try:
            await incremental.handler(self).on_partitions_assigned(
                set(assigned), set(revoked), set(newly_assigned)
            )
        except Exception as exc:
            await self.crash(exc)
