"""An agent over batches: the records of a fetch reach the agent as lists, one per partition.

Faust's stream gives an agent one record per step of its ``async for``: per record a loop
iteration (its iterator awaits ``sleep(0)``), a look at the queue, the stream's sensors and an
ack that wakes whoever waits for acks. `batches` takes what the agent's queue holds when the
agent wakes, up to ``max_records``, and yields it as `Batch`\\ es, one per source partition, in
offset order::

    @app.agent(source)
    async def running_sum(stream):
        async for batch in batches(stream, max_records=1000):
            for key, value in batch.items():
                sums[key] += value

Guarantees, the same as for a record of Faust's stream:

- A batch is acked once, when the agent asks for the next one, so its offsets (up to its last
  offset + 1) become committable together. Under exactly_once a commit waits for every record
  handed out to be acked (`streamapp.runtime.commits`), so it never falls inside a
  batch: the batch's table writes, changelog records and sends go in the transaction that
  commits its offsets.
- While a batch is processed, Faust's ``current_event()`` is its last record: a table write
  goes to the changelog partition of the batch's partition, a send to that partition's
  transaction (one partition per batch is what makes this right for every record of it).
- A table's changelog records of a batch go to the Kafka client's producer together as the
  batch ends, before its ack (`streamapp.sending.batch_changelog`): in the batch's
  transaction under exactly_once, and the store's persisted offset written once per changelog
  partition of the batch, when its last record is delivered.
- A record fetched under an earlier generation, or taken while the flow is stopped for a
  rebalance, is acked unprocessed, as Faust's stream skips it.
- A batch the agent does not finish (its body raised, it broke out of the loop, or it was
  cancelled) is not acked: no commit covers it, and it is processed again after a restart.
  Records cannot be blamed one by one in a batch, so ``bad_record_policy`` does not apply: the
  body raising stops the worker (unless it is stopping already), rather than commit around a
  half-processed batch. Catch a record's error inside the body to skip it.

The fetch loop hands out a partition's records of a round in one step, without a yield per
record (`streamapp.runtime.loop`): read a topic either in batches or record by record, not
both. Faust's per-stream event sensors (its monitor's
``events_total``) do not count batch records; its per-message ones do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload
from weakref import WeakKeyDictionary

from faust.types import TP, ChannelT, EventT, StreamT

from streamapp.runtime.consumer import Consumer as StreamappConsumer
from streamapp.sending import batch_changelog
from streamapp.streams.batch_stream import set_current_event, stop_iteration

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_MAX_RECORDS", "Batch", "BatchAbandoned", "batches"]

#: Records taken off the queue at most per wake-up of the agent (then cut per partition).
DEFAULT_MAX_RECORDS = 1000

#: Batches of a stream given out and not finished: held, so that their records stay unacked
#: (Faust's unacked set is weak) until the worker stops.
_abandoned: WeakKeyDictionary[StreamT[Any], list[Batch]] = WeakKeyDictionary()


class BatchAbandoned(RuntimeError):
    """An agent left a batch unfinished while the worker runs: the worker stops."""


@dataclass(eq=False)
class Batch(Sequence[EventT[Any]]):
    """Events of one source partition, in offset order: ``batch.tp``, ``len(batch)``,
    ``batch[i]``, iteration over events, ``values()`` and ``items()``."""

    tp: TP
    events: list[EventT[Any]] = field(default_factory=list)

    @overload
    def __getitem__(self, index: int) -> EventT[Any]: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[EventT[Any]]: ...
    def __getitem__(self, index: int | slice) -> EventT[Any] | Sequence[EventT[Any]]:
        return self.events[index]

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[EventT[Any]]:
        return iter(self.events)

    def values(self) -> list[Any]:
        """The events' values, in offset order."""
        return [event.value for event in self.events]

    def items(self) -> list[tuple[Any, Any]]:
        """The events' ``(key, value)`` pairs, in offset order."""
        return [(event.key, event.value) for event in self.events]

    @property
    def first_offset(self) -> int:
        """The offset of the batch's first record."""
        return int(self.events[0].message.offset)

    @property
    def last_offset(self) -> int:
        """The offset of the batch's last record."""
        return int(self.events[-1].message.offset)


def by_partition(events: Sequence[EventT[Any]]) -> list[Batch]:
    """``events`` cut into one batch per partition, each in the order given, the batches in the
    order of each partition's first event."""
    cut: dict[TP, Batch] = {}
    for event in events:
        tp = event.message.tp
        batch = cut.get(tp)
        if batch is None:
            batch = cut[tp] = Batch(tp)
        batch.events.append(event)
    return list(cut.values())


async def _take(queue: Any, max_records: int, within: float | None) -> list[Any]:
    """What the queue holds, up to ``max_records``; waits for the first one, and with
    ``within`` up to that many seconds more for the rest."""
    taken: list[Any] = []
    if queue.empty():
        taken.append(await queue.get())
    _drain(queue, taken, max_records)
    if within is not None and len(taken) < max_records:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while len(taken) < max_records:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                taken.append(await asyncio.wait_for(queue.get(), remaining))
            except TimeoutError:
                break
            _drain(queue, taken, max_records)
    return taken


def _drain(queue: Any, taken: list[Any], max_records: int) -> None:
    """Moves what ``queue`` holds to ``taken``, up to ``max_records`` in all, without waiting."""
    get = queue.get_nowait
    # As many items as it holds, counted once: a test of ``empty()`` per record was 3% of a
    # batch agent's CPU (docs/performance.md). Nothing puts in between (no await).
    for _ in range(min(max_records - len(taken), queue.qsize())):
        taken.append(get())
    # What the count leaves: an error thrown into the queue (not counted by qsize, raised by
    # get_nowait), as before.
    while len(taken) < max_records and not queue.empty():
        taken.append(get())


async def batches(
    stream: StreamT[Any], *, max_records: int = DEFAULT_MAX_RECORDS, within: float | None = None
) -> AsyncIterator[Batch]:
    """The agent's records as batches, one per partition (see the module's docs).

    Args:
        stream: The agent's stream, over a topic.
        max_records: The most records taken off the queue per wake-up of the agent.
        within: Seconds to wait for ``max_records`` once one record is there; by default
            the agent takes what is there, so a record's latency is not traded for bigger
            batches.

    Yields:
        A `Batch` per source partition, in offset order; it is acked when the agent asks
        for the next one.

    Raises:
        ValueError: ``max_records`` is below 1.
        TypeError: The stream is not over a topic, or its channel gives something other
            than events.
    """
    if max_records < 1:
        raise ValueError(f"max_records must be at least 1, not {max_records}")
    channel = stream.channel
    if not isinstance(channel, ChannelT):
        raise TypeError(f"batches() reads an agent's stream over a topic, not {channel!r}")
    app = stream.app
    consumer = app.consumer
    if not isinstance(consumer, StreamappConsumer):
        raise TypeError("batches() reads an agent's stream of a streamapp.App")
    queue = channel.queue
    acking_topics = app.topics.acking_topics
    flow_control = app.flow_control
    on_message_out = app.sensors.on_message_out
    started = await stream.maybe_start()
    out: Batch | None = None
    try:
        while not stream.should_stop:
            try:
                taken = await _take(queue, max_records, within)
            except StopAsyncIteration:
                # Faust's actor ends its stream by throwing StopAsyncIteration into the channel
                # (``Actor.cancel``, at shutdown or a revocation). Raised on out of this async
                # generator, CPython turns it into a RuntimeError and Faust restarts the agent.
                return
            generation = app.consumer_generation_id
            ready: list[EventT[Any]] = []
            skipped = []
            for event in taken:
                if not isinstance(event, EventT):
                    raise TypeError(f"batches() takes events, the channel gave {event!r}")
                message = event.message
                if message.topic in acking_topics and not message.tracked:
                    message.tracked = True
                    consumer.track_message(message)
                if not flow_control.is_active() or message.generation_id != generation:
                    skipped.append(message)  # as Faust's stream skips it: acked unprocessed
                else:
                    ready.append(event)
            if skipped:
                for message in consumer.ack_batch(skipped):
                    on_message_out(message.tp, message.offset, message)
            for batch in by_partition(ready):
                out = batch
                changelog = batch_changelog.begin(app, batch.tp)
                set_current_event(stream, batch.events[-1])
                yield batch
                set_current_event(stream, None)
                # Before the ack: a commit covering the batch comes after its changelog records.
                await batch_changelog.end(changelog)
                out = None
                for message in consumer.ack_batch([event.message for event in batch.events]):
                    on_message_out(message.tp, message.offset, message)
            # Faust's stream yields to the loop once per record; once per wake-up is enough
            # for the fetch loop and the commit to run between batches.
            await asyncio.sleep(0)
    finally:
        set_current_event(stream, None)
        batch_changelog.forget()
        if out is not None:
            _abandon(stream, out)
        stop_iteration(stream)
        if started:
            await stream.stop()
            stream.service_reset()


def _abandon(stream: StreamT[Any], batch: Batch) -> None:
    _abandoned.setdefault(stream, []).append(batch)
    app = stream.app
    if stream.should_stop or app.should_stop:
        return  # a stop: not acked, so processed again after the restart
    error = BatchAbandoned(
        f"a batch of {batch.tp.topic}[{batch.tp.partition}] (offsets {batch.first_offset} to "
        f"{batch.last_offset}) was left unfinished by its agent; the worker stops rather than "
        "commit around it (catch a record's error inside the batch to skip the record)"
    )
    logger.error("streamapp: %s", error)
    asyncio.get_running_loop().create_task(app.crash(error))
