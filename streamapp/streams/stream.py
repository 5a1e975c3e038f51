"""streamapp's ``Stream`` (the App's ``Stream`` setting): Faust's, whose agents take their records
a run at a time and get them one at a time.

An agent's ``async for`` over its stream (``stream``, ``stream.events()``, ``stream.items()``)
takes what the stream's queue holds when it runs out, a run (`streamapp.runtime.stream_runs`),
and gives it out one event at a time, with Faust's ``current_event`` and sensors per event;
each partition's table writes of the run are stored and sent to its changelog, and its records
acked, once its last record in the run is processed. Streams this does not suit keep Faust's
own iteration (`runs_apply`): one over something other than a topic, one with processors
(``group_by``, ``take``, ``filter``, ``echo``...), a combined one, one whose acks are the
agent's (``noack``), an agent's with ``concurrency`` above 1 (its actors share one queue: a run
would take records from the others), and any stream of an app whose consumer is not
streamapp's.

Faust's own iteration is its Python path: its Cython iterator acks by writing the acked offsets
straight into the private bookkeeping of Faust's consumer class rather than through
``Consumer.ack``, which streamapp's consumer (`streamapp.runtime.consumer`) needs.

An agent that leaves its ``async for`` over a record (it raised: ``bad_record_policy`` skips
the record, or Faust restarts the agent) leaves the iteration suspended at that record. Closing
it, as Faust's does, acks the record; here it also ends the run for the records given out
(their writes stored and sent, then acked) before the stream lets go of the record, and keeps
the run's records not given out yet for the stream's next iteration, which gives them first,
through the stop of a stream the iteration started (an agent's actor does not start its
stream: its first iteration does, and stops it as it ends, as Faust's does). The stream lets go
of the record only after that stop: the agent, called again once it has, finds the records
kept. A stop of the stream itself (the worker stops) releases them unprocessed (they are
processed again after the restart).

Faust private names (`streamapp.private_names.PRIVATE_NAMES`): ``Stream._py_aiter`` (Faust's
Python iteration) and ``_active_agens`` (the iterations its ``on_stop`` closes), as Faust's own
``__aiter__`` uses them; ``_set_current_event`` (the stream's and Faust's ``current_event()``,
as Faust's iteration sets them per event), ``_finalized`` (set as Faust's iteration sets it: no
operator is added to a stream being iterated) and ``_channel_stop_iteration`` (what Faust's
iteration does with its channel as it ends).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import faust
from faust.types import EventT, TopicT

# The Faust private names this module uses are checked as it is imported.
import streamapp.private_names  # noqa: F401
from streamapp.runtime import stream_runs
from streamapp.runtime.consumer import Consumer

logger = logging.getLogger(__name__)

#: What an iteration gives per event: its value (``async for value in stream``), the event
#: (``stream.events()``) or its key and value (``stream.items()``).
VALUES, EVENTS, ITEMS = 0, 1, 2


class Stream(faust.Stream[Any]):
    """Faust's stream, whose agents take their records a run at a time (see the module)."""

    #: Events a closed iteration took off the queue and did not give out: the next gives them
    #: first.
    _leftover: list[Any] | None = None

    def __aiter__(self) -> AsyncIterator[Any]:
        it = self._runs(VALUES) if self.runs_apply() else self._py_aiter()
        self._active_agens.add(cast(Any, it))
        return it

    def events(self) -> AsyncIterator[EventT[Any]]:
        if not self.runs_apply():
            return cast(AsyncIterator[EventT[Any]], super().events())
        it = self._runs(EVENTS)
        self._active_agens.add(cast(Any, it))
        return it

    def items(self) -> AsyncIterator[tuple[Any, Any]]:
        if not self.runs_apply():
            return super().items()
        it = self._runs(ITEMS)
        self._active_agens.add(cast(Any, it))
        return it

    def runs_apply(self) -> bool:
        """Whether this stream's iteration takes runs (see the module); decided as an
        iteration starts."""
        return (
            isinstance(self.channel, TopicT)
            and self.enable_acks
            and not self.info()["processors"]
            and not self.combined
            and self.concurrency_index is None
            and type(self).on_merge is faust.Stream.on_merge
            and isinstance(getattr(self.app, "streamapp_consumer", None), Consumer)
        )

    async def _runs(self, shape: int) -> AsyncIterator[Any]:
        """The stream's events, a run at a time (see the module)."""
        self._finalized = True
        started = await self.maybe_start()
        app = self.app
        consumer: Any = app.consumer
        queue = cast(Any, self.channel).queue
        sensors = app.sensors
        on_event_in = sensors.on_stream_event_in
        on_event_out = sensors.on_stream_event_out
        flow_control = app.flow_control
        acking_topics = app.topics.acking_topics
        set_current_event = self._set_current_event
        run: stream_runs.Run | None = None
        taken: list[Any] = []
        #: Closed while it gave an event out (the agent left its loop): keep what is left.
        closed_at_event = False
        #: Ended by its actor's cancel (Faust throws StopAsyncIteration into the channel).
        cancelled = False
        try:
            while not self.should_stop:
                leftover, self._leftover = self._leftover, None
                if leftover:
                    taken = leftover
                else:
                    taken = []
                    try:
                        await stream_runs.take(queue, stream_runs.RECORDS_PER_RUN, taken)
                    except StopAsyncIteration:
                        cancelled = True
                        return
                    except BaseException:
                        # An error thrown into the queue (raised as Faust's iteration raises
                        # it, before the records behind it): what was taken goes first next.
                        self._leftover = taken or None
                        raise
                run = stream_runs.Run(app, taken)
                last_of = run.last_of
                for index, event in enumerate(taken):
                    if not flow_control.is_active():
                        # The flow stopped (the worker stops): the rest of the run is dropped
                        # unprocessed, as a clear drops what the queue holds; it is processed
                        # again after the restart.
                        stream_runs.release(app, run.leftover(), flowing=False)
                        break
                    run.given += 1
                    if not isinstance(event, EventT):
                        # A value put in the channel itself: Faust gives it as it is, with no
                        # event to ack (and events() and items() leave it out).
                        if shape == VALUES:
                            self.current_event = None
                            closed_at_event = True
                            yield event
                            closed_at_event = False
                        continue
                    message = event.message
                    tp = message.tp
                    if message.topic in acking_topics and not message.tracked:
                        message.tracked = True
                        consumer.track_message(message)
                    # Acked with its partition's records, processed or not (the agent's own,
                    # and a stale one Faust's stream skips).
                    run.note_given(message)
                    if message.generation_id == app.consumer_generation_id:
                        run.use_changelog(tp)
                        state = on_event_in(tp, message.offset, self, event)
                        set_current_event(event)
                        self.events_total += 1
                        closed_at_event = True
                        if shape == VALUES:
                            yield event.value
                        elif shape == EVENTS:
                            yield event
                        else:
                            yield event.key, event.value
                        closed_at_event = False
                        self.current_event = None
                        on_event_out(tp, message.offset, self, event, state)
                    if last_of[tp] == index:
                        await run.end_partition(tp)
                await run.end()
                run = None
                set_current_event(None)
                await stream_runs.yield_to_loop()
        finally:
            await self._end_iteration(run, closed_at_event, cancelled, started)

    async def _end_iteration(
        self,
        run: stream_runs.Run | None,
        closed_at_event: bool,
        cancelled: bool,
        started: bool,
    ) -> None:
        """The iteration ends (see the module): the run's records given out are stored, sent
        and acked (the one the agent held included, as Faust's iteration acks it), what it did
        not give out is kept for the next iteration, or released as the stream stops; a stream
        the iteration started is stopped, as Faust's iteration stops it; then, last, the stream
        lets go of its current event."""
        app = self.app
        stopping = self.should_stop or app.should_stop
        try:
            if run is not None:
                left = run.leftover()
                if left:
                    if closed_at_event and not stopping and not cancelled:
                        self._leftover = left + (self._leftover or [])
                    else:
                        stream_runs.release(app, left, flowing=app.flow_control.is_active())
                try:
                    await run.end()
                except Exception as exc:
                    logger.warning(
                        "streamapp: the records of a stream's last run could not be stored and "
                        "sent (they are processed again after a restart): %r",
                        exc,
                    )
            if (stopping or cancelled) and self._leftover:
                left, self._leftover = self._leftover, None
                stream_runs.release(app, left, flowing=app.flow_control.is_active())
        finally:
            self._channel_stop_iteration(self.channel)
            try:
                if started:
                    await self._stop_started()
            finally:
                # Last: an agent that left its loop over a record waits for the stream to let
                # go of it (`streamapp.bad_records.Agent`) before it iterates the stream again,
                # which must find the stream as this iteration leaves it.
                self.current_event = None
                self._set_current_event(None)

    async def _stop_started(self) -> None:
        """Stop the stream this iteration started (an agent's actor does not start its stream:
        its first iteration does), as Faust's iteration does, keeping the records kept for the
        next iteration: a stop releases those a stream holds, as the worker stops, but this one
        comes of the agent leaving its loop over a record and being called again."""
        kept, self._leftover = self._leftover, None
        try:
            await self.stop()
            self.service_reset()
        finally:
            if kept:
                self._leftover = kept + (self._leftover or [])

    async def on_stop(self) -> None:
        await super().on_stop()
        left, self._leftover = self._leftover, None
        if left:
            stream_runs.release(self.app, left, flowing=False)
