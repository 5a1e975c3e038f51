"""A record-at-a-time stream's records, taken off its queue a run at a time.

Faust's stream takes one record off its queue per step of the agent's ``async for``: a loop
iteration (its iterator awaits ``sleep(0)``), a look at the queue, the stream's sensors, an
ack that wakes whoever waits for acks; and each table write of the record sends its changelog
record through Faust's per-record path (a ``FutureMessage``, the producer's buffer, a callback
per record that writes the store's persisted offset). streamapp's stream
(`streamapp.streams.stream`) takes what its queue holds when the agent asks for a record
and none is left, up to `RECORDS_PER_RUN`: a *run*. The agent still gets one event at a time,
in the order the fetch loop handed them out (timestamp order across partitions), and for each:
the stream's ``current_event``, Faust's ``current_event()``, ``events_total`` and Faust's stream
sensors, as Faust's iterator sets them.

What differs is what a run does together, as a batch does (`streamapp.batches`):

- **table writes**: while a record of partition P is processed, a table write goes to P's
  changelog of the run (`streamapp.sending.batch_changelog`, one per source partition of
  the run, each in P's transaction under exactly_once): the store's writes wait in the
  partition's pending writes, which reads see, and the run's end stores them in one write batch
  and hands their changelog records (each key's last) to the producer;
- **acks**: a partition's records of a run are acked once its last record in the run is
  processed, after their changelog records are with the producer, so a commit never covers a
  record whose changelog records were not sent, and a rebalance giving the partition up waits
  no longer than for Faust's stream;
- **a loop iteration** per run, not per record.

A record fetched under an earlier generation is acked unprocessed, as Faust's stream skips it;
when the flow stops (the worker stops), the rest of the run is dropped unprocessed, as a clear
drops what the queue holds, to be processed again after the restart. Both are checked per
record, as its turn comes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from faust.types import TP, AppT, EventT, Message

from streamapp.sending import batch_changelog

#: Records taken off a stream's queue at most per run (what the queue holds, up to this).
RECORDS_PER_RUN = 1000


async def take(queue: Any, max_records: int, taken: list[Any]) -> None:
    """Move what ``queue`` holds to ``taken``, up to ``max_records`` in all; wait for the first
    one when it is empty. ``taken`` is the caller's: it keeps what was taken when the queue
    raises an error thrown into it (Faust throws errors into a stream's queue)."""
    if queue.empty():
        taken.append(await queue.get())
    get = queue.get_nowait
    # As many items as it holds, counted once; nothing puts in between (no await).
    for _ in range(min(max_records - len(taken), queue.qsize())):
        taken.append(get())
    # What the count leaves: an error thrown into the queue (not counted by qsize, raised by
    # get_nowait).
    while len(taken) < max_records and not queue.empty():
        taken.append(get())


class Run:
    """The records of one take, given to the agent one at a time (see the module)."""

    __slots__ = ("app", "changelogs", "ended", "events", "given", "given_by_tp", "last_of")

    def __init__(self, app: AppT, events: Sequence[Any]) -> None:
        self.app = app
        self.events = events
        #: How many of the events were given out (the last may still be in the agent's hands).
        self.given = 0
        #: Source partition -> the messages of its records given out, not acked yet.
        self.given_by_tp: dict[TP, list[Message]] = {}
        #: Source partition -> the index of its last record in the run.
        self.last_of: dict[TP, int] = {
            event.message.tp: index
            for index, event in enumerate(events)
            if isinstance(event, EventT)
        }
        #: Source partition -> its changelog of the run (None: Faust's per-record path).
        self.changelogs: dict[TP, batch_changelog.BatchChangelog | None] = {}
        self.ended = False

    def use_changelog(self, tp: TP) -> None:
        """The agent is about to process a record of ``tp``: its table writes go to ``tp``'s
        changelog of the run."""
        changelogs = self.changelogs
        if tp in changelogs:
            batch_changelog.use(changelogs[tp])
        else:
            changelogs[tp] = batch_changelog.begin(self.app, tp)

    def note_given(self, message: Message) -> None:
        """``message``'s record was given out (or skipped): acked with its partition's."""
        found = self.given_by_tp.get(message.tp)
        if found is None:
            self.given_by_tp[message.tp] = [message]
        else:
            found.append(message)

    def leftover(self) -> list[Any]:
        """The events not given out yet."""
        return list(self.events[self.given :])

    async def end_partition(self, tp: TP) -> None:
        """The run's last record of ``tp`` is processed: store its table writes, hand their
        changelog records to the producer, then ack its records (not before: a commit covering
        them comes after their changelog records). A partition ends as soon as its last record
        is processed, so a rebalance that gives it up, or a commit, waits no longer than for
        Faust's stream. If its records cannot be sent, they stay unacked (processed again after
        a restart) and the error is raised."""
        batch_changelog.use(None)
        changelog = self.changelogs.pop(tp, None)
        messages = self.given_by_tp.pop(tp, ())
        if changelog is not None:
            await batch_changelog.end(changelog)
        ack(self.app, messages)

    async def end(self) -> None:
        """End every partition of the run not ended yet (`end_partition`); the first error is
        raised once all were tried."""
        if self.ended:
            return
        self.ended = True
        error: BaseException | None = None
        for tp in [*self.changelogs, *(tp for tp in self.given_by_tp if tp not in self.changelogs)]:
            try:
                await self.end_partition(tp)
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error


def ack(app: AppT, messages: Sequence[Message]) -> None:
    """Ack ``messages``, as each stream reading them would; Faust's ``on_message_out`` sensors
    for those whose last reference this was."""
    if not messages:
        return
    on_message_out = app.sensors.on_message_out
    for message in app.consumer.ack_batch(messages):  # type: ignore[attr-defined]
        on_message_out(message.tp, message.offset, message)


def release(app: AppT, events: Sequence[Any], *, flowing: bool) -> None:
    """Events taken off a stream's queue that no iteration of it will give out: as records
    dropped from a queue unprocessed (`streamapp.runtime.consumer.Consumer.on_dropped`), no
    stop waits for them, and while the flow runs their partitions go back to the first of
    them."""
    if not events:
        return
    on_dropped = getattr(app.consumer, "on_dropped", None)
    if on_dropped is not None:
        on_dropped([e for e in events if isinstance(e, EventT)], flowing)


async def yield_to_loop() -> None:
    """Once per run: the fetch loop and a commit run between two runs."""
    await asyncio.sleep(0)
