"""A windowed aggregate as a Faust agent and one changelog-backed table.

`WindowedAggregate(app, name, source=..., windows=..., initial=..., fold=...)` declares:

* one agent consuming ``source`` (as raw bytes, decoded with the source topic's own codecs);
* one table, ``<name>-windows``, with the source's partition count: its changelog joins the
  source's co-partition group (a table declared with the source's count follows it), so a
  worker that takes partition *p* of the source restores partition *p* of the windows;
* the aggregate itself, decided by a processor over the table: `AggregateProcessor` for
  tumbling and hopping windows, `SessionProcessor` for sessions, `SlidingProcessor` for sliding
  windows (see `streamapp.aggregates.window` for the windows, lateness and closing).

Each record is read when it arrives (`streamapp.joins.sources.read_record`): key and value
decoded with the source topic's codecs, event time and id taken. One that cannot be read is
reported to ``on_record`` as ``UNDECODABLE`` and handed to the app's ``bad_record_policy`` before
it is folded anywhere.

Why not Faust's windowed tables (``app.Table(...).tumbling(...)``)? They expire windows by the
wall clock (``time.time()`` in ``Collection._del_old_keys``), not by event time; they have no
grace period and no notion of a late record; their ``on_window_close`` fires from that
wall-clock timer; and their expiry heap lives in memory only, filled by writes, so windows
restored from RocksDB or the changelog never expire (faust-streaming/faust #385). Here the
clock, the windows and the expiry index are all table entries: a recovered worker closes the
recovered windows as soon as its clock passes them.

Output: each window's final value, once the partition's clock has closed it, goes to
``output``: a topic (the value ``to_value(result)``, by default ``{"start": ..., "end": ...,
"value": ...}``; the key the source key) or an async or plain callback taking a `WindowResult`.
Open windows are readable too (`WindowedAggregate.current`). Late records are counted per
partition and, with ``dead_letter_topic``, sent there as they came.

Batches: with ``batch_records=n`` the agent reads its source in batches of up to ``n`` records
(`streamapp.batches`): the records folded one by one, the table read and written through a
`streamapp.joins.write_back.WriteBack` (each changed entry written once per batch, the
partition's bookkeeping last), one sweep per batch.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from faust.types import AppT, TopicT

from streamapp.aggregates.core import AggregateProcessor, ClosedWindow, Store, is_book_key
from streamapp.aggregates.sessions import SessionProcessor
from streamapp.aggregates.sliding import SlidingProcessor
from streamapp.aggregates.window import SessionWindows, SlidingWindows, Windows
from streamapp.batches import Batch, batches
from streamapp.joins import _io, declared, deprecations
from streamapp.joins.core import ExpiryIndex
from streamapp.joins.outcome import Expiry, Outcome
from streamapp.joins.sources import (
    OnRecord,
    Source,
    UndecodableRecord,
    apply_bad_record_policy,
    as_source,
    read_record,
    report,
)
from streamapp.joins.stream_stream import _send, emit
from streamapp.joins.write_back import WriteBack

__all__ = ["WindowResult", "WindowedAggregate", "windowed_aggregate", "windowed_count"]

V = TypeVar("V")
A = TypeVar("A")

AnyWindows = Windows | SessionWindows | SlidingWindows
Processor = AggregateProcessor[Any] | SessionProcessor[Any] | SlidingProcessor[Any]
SOURCE = "source"


@dataclass(frozen=True)
class WindowResult(Generic[A]):
    """A window's final value: ``key`` (decoded), ``[start_ms, end_ms)``, ``value`` (the
    accumulator), ``partition``; ``message``: the source record being processed when the
    window closed (pass it to `WindowedAggregate.send` to send on its behalf)."""

    key: Any
    start_ms: int
    end_ms: int
    value: A
    partition: int
    message: Any = None


def _start_end_value(result: WindowResult[Any]) -> Any:
    return {"start": result.start_ms, "end": result.end_ms, "value": result.value}


def _zero() -> int:
    return 0


def _plus_one(count: int, _value: Any) -> int:
    return count + 1


class WindowedAggregate(Generic[V, A]):
    """A windowed aggregate declared on ``app`` (see the module and docs/windows.md).

    Arguments:

    - ``app``: a `streamapp.App`; ``name``: the aggregate's name (its table is
      ``<name>-windows``, its agent ``<name>-aggregate``).
    - ``source``: a topic keyed by the aggregate's key, or a `streamapp.joins.Source` (event time
      ``time_ms``; ``id``: a record whose id a window holds already is a duplicate, not folded).
    - ``windows``: `Windows.tumbling`, `Windows.hopping`, `Windows.sliding` or
      `Windows.session`.
    - ``initial()`` and ``fold(accumulator, value)``: per key and window the value is
      ``fold(...fold(initial(), v1)..., vn)`` over its records in offset order; it must be
      JSON-friendly (it is stored in a JSON table). ``merge(earlier, later)``: two sessions'
      values when a record joins them (session windows only, and required there).
    - ``output``: a topic (each result's value is ``to_value(result)``, by default
      ``{"start": ..., "end": ..., "value": ...}``), a callback, plain or async, taking a
      `WindowResult`, or None to keep the values readable only (`current`).
    - ``partitions``: the source's partition count, which the table takes too; by default the
      count the topic declares, else the app's ``topic_partitions``.
    - ``on_record``: called, plain or async, with a `streamapp.joins.SourceRecord` for every
      source record once handled.
    - ``batch_records``: read the source in batches of up to that many records.
    - ``dead_letter_topic``: where late records go, as they came.
    - ``expiry_bucket_ms``: for session and sliding windows, the width of the time buckets in
      which closed windows are swept (values come out up to that much after closing; 1, the
      default, is exact).

    Deprecated (one release): ``time_ms`` (use ``Source(topic, time_ms=...)``).

    Raises ValueError for session windows without ``merge``, ``merge`` with other windows, a
    ``time_ms`` given twice, or a bad ``batch_records`` or ``partitions``; TypeError for
    windows of an unknown kind.
    """

    def __init__(
        self,
        app: AppT,
        name: str,
        *,
        source: TopicT | Source,
        windows: AnyWindows,
        initial: Callable[[], A],
        fold: Callable[[A, V], A],
        merge: Callable[[A, A], A] | None = None,
        output: TopicT | Callable[[WindowResult[A]], Any] | None = None,
        partitions: int | None = None,
        to_value: Callable[[WindowResult[A]], Any] = _start_end_value,
        on_record: OnRecord | None = None,
        batch_records: int | None = None,
        dead_letter_topic: str | None = None,
        expiry_bucket_ms: int = 1,
        time_ms: Callable[[V], int] | None = None,
    ) -> None:
        owner = f"aggregate {name}"
        deprecations.renamed(
            "WindowedAggregate",
            {"time_ms": time_ms},
            {"time_ms": "source=Source(topic, time_ms=...)"},
        )
        declared.check_batch_records(owner, batch_records)
        read_from = as_source(source)
        if time_ms is not None:
            if read_from.time_ms is not None:
                raise ValueError(f"{owner}: time_ms given twice (time_ms= and Source)")
            read_from = Source(read_from.topic, time_ms, read_from.id)
        self.app = app
        self.name = name
        self.owner = owner
        self.windows = windows
        self.read_from = read_from
        self.source = read_from.topic
        self.output = output
        self.to_value = to_value
        self.on_record = on_record
        self.batch_records = batch_records
        self.dead_letter_topic = dead_letter_topic
        self.partitions = declared.source_partitions(app, owner, partitions, [self.source])
        self.raw_source = app.topic(read_from.name, partitions=self.partitions, **_io.RAW)
        # Keys and values as JSON (Faust's choice for a str key type and no value type): the
        # accumulator must be JSON-friendly.
        self.table = app.Table(f"{name}-windows", partitions=self.partitions, key_type=str)
        store: Store = self.table
        self.write_back = WriteBack(store) if batch_records is not None else None
        self.processor: Processor = self._processor(
            windows, self.write_back or store, initial, fold, merge, expiry_bucket_ms
        )
        declared.note_output(app, owner, output, self.partitions)
        declared.note_dead_letters(app, owner, dead_letter_topic)
        app.on_partitions_revoked.connect(self._forget)
        app.on_partitions_assigned.connect(self._forget)
        self.agent = app.agent(self.raw_source, name=f"{name}-aggregate")(self._run)

    def _processor(
        self,
        windows: AnyWindows,
        store: Store,
        initial: Callable[[], Any],
        fold: Callable[[Any, Any], Any],
        merge: Callable[[Any, Any], Any] | None,
        bucket_ms: int,
    ) -> Processor:
        if isinstance(windows, SessionWindows):
            if merge is None:
                raise ValueError(
                    f"{self.owner}: session windows need merge(earlier, later): what two "
                    "sessions' values make when a record joins them"
                )
            return SessionProcessor(
                windows,
                store,
                initial=initial,
                fold=fold,
                merge=merge,
                index=ExpiryIndex(bucket_ms),
            )
        if merge is not None:
            raise ValueError(f"{self.owner}: merge is for session windows only")
        if isinstance(windows, SlidingWindows):
            return SlidingProcessor(
                windows,
                store,
                initial=initial,
                fold=fold,
                restore=self._restore,
                index=ExpiryIndex(bucket_ms),
            )
        if isinstance(windows, Windows):
            return AggregateProcessor(windows, store, initial=initial, fold=fold)
        raise TypeError(f"{self.owner}: windows must be built with Windows, not {windows!r}")

    @classmethod
    def count(
        cls,
        app: AppT,
        name: str,
        *,
        source: TopicT | Source,
        windows: AnyWindows,
        **options: Any,
    ) -> WindowedAggregate[Any, int]:
        """A `WindowedAggregate` counting the records per key and window (sessions merged by
        adding their counts); ``options`` are the other keywords of the class. Raises as the
        class does."""
        return WindowedAggregate[Any, int](
            app,
            name,
            source=source,
            windows=windows,
            initial=_zero,
            fold=_plus_one,
            merge=operator.add if isinstance(windows, SessionWindows) else None,
            **options,
        )

    def _restore(self, held: Any) -> Any:
        # A sliding window's kept record: its raw value (base64), decoded as on arrival.
        return _io.loads_value(self.app, self.source, _io.unb64(held))

    # -- reading (this worker's partitions) --

    def changelog_topic(self) -> str:
        """The name of the table's changelog topic."""
        return self.table.changelog_topic.get_topic_name()

    def current(self, key: Any) -> dict[int, A]:
        """The key's windows held on this worker: start -> value (open, or not swept yet)."""
        encoded = _io.b64(_io.dumps_key(self.app, self.source, key))
        assert encoded is not None
        return self.processor.windows_of(encoded)

    def all_windows(self) -> dict[Any, dict[int, A]]:
        """Every key's held windows on this worker (a scan of its partitions of the table)."""
        out: dict[Any, dict[int, A]] = {}
        for stored_key in list(self.table.keys()):
            if isinstance(stored_key, str) and stored_key.startswith("k/"):
                encoded = stored_key.removeprefix("k/")
                key = _io.loads_key(self.app, self.source, _io.unb64(encoded))
                out[key] = self.processor.windows_of(encoded)
        return out

    def late_counts(self) -> dict[str, int]:
        """Late records per partition (``p0``...), of this worker's partitions."""
        out: dict[str, int] = {}
        for key, value in list(self.table.items()):
            if isinstance(key, str) and key.startswith("~p/"):
                out[f"p{key.removeprefix('~p/')}"] = int(value[2])
        return out

    # -- the agent --

    def _forget(self, sender: Any, /, *args: Any, **kwargs: Any) -> None:
        self.processor.forget()

    async def _run(self, stream: Any) -> None:
        if self.batch_records is not None:
            async for batch in batches(stream, max_records=self.batch_records):
                await self.on_batch(batch)
            return
        async for event in stream.events():
            await self.on_message(event.message)

    async def on_message(self, message: Any) -> None:
        """Handle one source record (the record-at-a-time agent): fold it, then emit the
        windows the clock closed.

        A record that cannot be read meets the app's ``bad_record_policy`` (raises its
        `streamapp.joins.UndecodableRecord` under ``fail``).
        """
        if not await self._handle(message):
            return
        await self._sweep(message)

    async def on_batch(self, batch: Batch) -> None:
        """Handle one batch of source records of one partition (``batch_records``).

        Raises what a record's handling raised (a bad record's error under ``fail``), the batch
        then written nowhere.
        """
        handled = None
        try:
            for event in batch:
                if await self._handle(event.message):
                    handled = event.message
            if handled is not None:
                await self._sweep(handled)
            if self.write_back is not None:
                self.write_back.write_through(last=is_book_key)
        except BaseException:
            if self.write_back is not None:
                self.write_back.discard()
            self.processor.forget()
            raise

    async def _handle(self, message: Any) -> bool:
        """Fold one record; False for one that cannot be read (it went to the policy)."""
        try:
            read = read_record(self.app, self.owner, self.read_from, message)
        except UndecodableRecord as bad:
            await report(
                self.on_record,
                self.app,
                self.source,
                SOURCE,
                message,
                Outcome.UNDECODABLE,
                None,
                bad,
            )
            await apply_bad_record_policy(self.app, message, bad, self.agent.name)
            return False
        key = _io.b64(message.key)
        assert key is not None
        processor = self.processor
        # Only sliding windows keep records (as their bytes, decoded again by `_restore`).
        held = _io.b64(message.value) if isinstance(processor, SlidingProcessor) else None
        arrival = processor.process(
            message.partition, key, message.offset, read.time_ms, read.value, id=read.id, held=held
        )
        if arrival.outcome is Outcome.LATE:
            if self.dead_letter_topic is not None:
                await _io.dead_letter_late(
                    self.app,
                    message,
                    self.dead_letter_topic,
                    ("aggregate", self.name),
                    read.time_ms,
                )
            self.processor.count_late(message.partition, message.offset)
        await report(self.on_record, self.app, self.source, SOURCE, message, arrival.outcome, read)
        return True

    async def _sweep(self, message: Any) -> None:
        """Emit the windows the clock closed in ``message``'s partition, on its behalf, and
        forget them once what was sent is out."""
        expiry: Expiry[ClosedWindow[A]] = self.processor.plan_expiry(message.partition)
        if expiry.empty:
            return
        for closed in expiry.emitted:
            await self._emit(message, closed)
        await _io.flush_before_forgetting(self.app)
        expiry.apply()

    async def _emit(self, source: Any, closed: ClosedWindow[A]) -> None:
        if self.output is None:
            return
        key = _io.loads_key(self.app, self.source, _io.unb64(closed.key))
        result = WindowResult(
            key, closed.start_ms, closed.end_ms, closed.value, source.partition, source
        )
        await emit(self.app, self.output, source, key, result, self.to_value)

    async def send(
        self,
        message: Any,
        topic: TopicT,
        *,
        key: Any,
        value: Any,
        headers: _io.Headers | None = None,
    ) -> None:
        """Send ``key`` and ``value`` (encoded with ``topic``'s codecs) on behalf of ``message``
        (`WindowResult.message`, `streamapp.joins.SourceRecord.message`): under exactly_once in
        that record's transaction. Raises what the codecs or the producer raise."""
        await _send(self.app, message, topic, key, value, headers)


def windowed_aggregate(
    app: AppT,
    name: str,
    *,
    source: TopicT,
    windows: Windows,
    initial: Callable[[], Any],
    fold: Callable[[Any, Any], Any],
    partitions: int,
    output: TopicT | Callable[[WindowResult[Any]], Any] | None = None,
    to_value: Callable[[WindowResult[Any]], Any] = _start_end_value,
    time_ms: Callable[[Any], int] | None = None,
    dead_letter_topic: str | None = None,
) -> WindowedAggregate[Any, Any]:
    """Deprecated: declare the aggregate with `WindowedAggregate` (event time in
    `streamapp.joins.Source`). Warns, then declares it so."""
    deprecations.warn("windowed_aggregate(...)", "WindowedAggregate(...)")
    return WindowedAggregate(
        app,
        name,
        source=Source(source, time_ms),
        windows=windows,
        initial=initial,
        fold=fold,
        partitions=partitions,
        output=output,
        to_value=to_value,
        dead_letter_topic=dead_letter_topic,
    )


def windowed_count(
    app: AppT,
    name: str,
    *,
    source: TopicT,
    windows: Windows,
    partitions: int,
    output: TopicT | Callable[[WindowResult[Any]], Any] | None = None,
    to_value: Callable[[WindowResult[Any]], Any] = _start_end_value,
    time_ms: Callable[[Any], int] | None = None,
    dead_letter_topic: str | None = None,
) -> WindowedAggregate[Any, int]:
    """Deprecated: declare the count with `WindowedAggregate.count` (event time in
    `streamapp.joins.Source`). Warns, then declares it so."""
    deprecations.warn("windowed_count(...)", "WindowedAggregate.count(...)")
    return WindowedAggregate.count(
        app,
        name,
        source=Source(source, time_ms),
        windows=windows,
        partitions=partitions,
        output=output,
        to_value=to_value,
        dead_letter_topic=dead_letter_topic,
    )
