"""The base of `streamapp.App`: Faust's App with its producer start replaced."""

from __future__ import annotations

import faust
from faust.types import ProducerT
from mode.utils.futures import stampede

# The installed Faust and aiokafka, and the private names streamapp uses, are checked as
# streamapp is imported: a worker on other releases stops at once with one line.
import streamapp.private_names  # noqa: F401


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
