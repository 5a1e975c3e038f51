"""The windowed stream-stream join as a Faust agent and two changelog-backed tables.

`WindowedJoin(app, name, left=..., right=..., window=..., output=...)` declares:

* one agent consuming both source topics as one ``app.topic(left, right, partitions=n)``:
  topics declared together are co-partitioned, both for streamapp's startup check
  (`streamapp.topic_check`: one line naming each topic and its partition count when they
  differ, and the worker refuses to start) and for the assignor (same partition count, same
  subscribers: one group, partition *p* of both on one worker);
* two tables, ``<name>-left`` and ``<name>-right``, with ``n`` partitions: their changelogs
  join the same group (a table declared with the sources' count follows them), so a worker
  that takes partition *p* of the sources restores partition *p* of the state;
* the join itself, decided by `streamapp.joins.core.JoinProcessor` (see `streamapp.joins.window`
  for the rule, lateness and expiry).

Each record is read when it arrives (`streamapp.joins.sources.read_record`): key and value
decoded with its own topic's codecs, event time and id taken. One that cannot be read is
reported to ``on_record`` as ``UNDECODABLE`` and handed to the app's ``bad_record_policy``
(skipped, dead-lettered or failed) before anything is stored; what is stored decodes, so an
output never fails on another record's bytes.

Output: each pair (and, for left and outer joins, each unmatched record once it has expired)
goes to ``output``: a topic (the value ``to_value(result)``, the key the source key) or an async
or plain callback taking a `JoinResult`. Late records are counted per partition and, with
``dead_letter_topic``, sent there as they came (bytes untouched, headers saying why).

Batches: with ``batch_records=n`` the agent reads its sources in batches of up to ``n`` records
(`streamapp.batches`) and handles a batch at once: the records one by one, as above, but the
tables read and written through a `streamapp.joins.write_back.WriteBack` (each changed entry
written once per batch, so one changelog record per entry rather than per write), one expiry
sweep per batch once its records are handled (what it drops counts as gone for them already,
so they are joined as record by record) and, under at-least-once, one producer flush per batch
before the expired records are deleted. Any error other than a bad record's (a callback that
raises) stops the worker, the batch unacknowledged.

Guarantees: under exactly_once every pair is emitted once. Under at-least-once none is lost
across crashes and restarts; a record processed again after a crash emits its pairs again. Both
hold over batches: a batch's table writes, sends and offsets commit together.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from faust.types import AppT, TopicT

from streamapp.batches import Batch, batches
from streamapp.joins import _io, declared, deprecations
from streamapp.joins.core import Entry, ExpiryIndex, JoinProcessor, Pair, Store
from streamapp.joins.outcome import Expiry, Outcome
from streamapp.joins.sources import (
    OnRecord,
    Source,
    SourceRecord,
    UndecodableRecord,
    apply_bad_record_policy,
    as_source,
    read_record,
    report,
)
from streamapp.joins.window import JoinKind, JoinWindow, Side
from streamapp.joins.write_back import WriteBack

__all__ = ["JoinResult", "WindowedJoin", "windowed_join"]

L = TypeVar("L")
R = TypeVar("R")


@dataclass(frozen=True)
class JoinResult(Generic[L, R]):
    """One output of a windowed join: a pair, or an unmatched record (the other side None).

    ``key``: the source key (decoded); ``left``/``right``: the two records' decoded values;
    ``left_time_ms``/``right_time_ms``: their event times; ``partition``: the source partition;
    ``message``: the source record (a Faust message) being processed when this was emitted:
    pass it to `WindowedJoin.send` to send more on its behalf.
    """

    key: Any
    left: L | None
    right: R | None
    left_time_ms: int | None
    right_time_ms: int | None
    partition: int
    message: Any = None


def _left_and_right(result: JoinResult[Any, Any]) -> Any:
    return {"left": result.left, "right": result.right}


class WindowedJoin(Generic[L, R]):
    """A windowed stream-stream join declared on ``app`` (see the module and docs/joins.md).

    Arguments:

    - ``app``: a `streamapp.App`; ``name``: the join's name (its tables are ``<name>-left`` and
      ``<name>-right``, its agent ``<name>-join``).
    - ``left``, ``right``: the two sources, each a topic keyed by the join key or a
      `streamapp.joins.Source` (event time ``time_ms``, record id ``id``).
    - ``window``: the `JoinWindow` (which pairs match, grace); ``kind``: ``"inner"``, ``"left"``
      or ``"outer"``.
    - ``output``: a topic (each result's value is ``to_value(result)``, by default
      ``{"left": ..., "right": ...}``) or a callback, plain or async, taking a `JoinResult`.
    - ``partitions``: the sources' partition count, which the tables take too; by default the
      count the topics declare, else the app's ``topic_partitions``.
    - ``on_record``: called, plain or async, with a `streamapp.joins.SourceRecord` for every
      source record once handled.
    - ``batch_records``: read the sources in batches of up to that many records (default:
      record by record).
    - ``dead_letter_topic``: where late records go, as they came.
    - ``expiry_bucket_ms``: the width of the expiry index's time buckets (unmatched records come
      out up to that much after they expire; 1 is exact).

    Deprecated (one release): ``left_time_ms``/``right_time_ms`` and ``left_id``/``right_id``
    (use ``Source(topic, time_ms=..., id=...)``), ``combine(left, right)`` (use
    ``to_value(result)``).

    Raises ValueError when ``left`` and ``right`` are one topic, when a deprecated keyword and
    its `Source` field are both given, or for a bad ``batch_records`` or ``partitions``.
    """

    def __init__(
        self,
        app: AppT,
        name: str,
        *,
        left: TopicT | Source,
        right: TopicT | Source,
        window: JoinWindow,
        output: TopicT | Callable[[JoinResult[L, R]], Any],
        kind: JoinKind | str = JoinKind.INNER,
        partitions: int | None = None,
        to_value: Callable[[JoinResult[L, R]], Any] | None = None,
        on_record: OnRecord | None = None,
        batch_records: int | None = None,
        dead_letter_topic: str | None = None,
        expiry_bucket_ms: int = 100,
        combine: Callable[[L | None, R | None], Any] | None = None,
        left_time_ms: Callable[[L], int] | None = None,
        right_time_ms: Callable[[R], int] | None = None,
        left_id: Callable[[L], str] | None = None,
        right_id: Callable[[R], str] | None = None,
    ) -> None:
        owner = f"join {name}"
        deprecations.renamed(
            "WindowedJoin",
            {
                "combine": combine,
                "left_time_ms": left_time_ms,
                "right_time_ms": right_time_ms,
                "left_id": left_id,
                "right_id": right_id,
            },
            {
                "combine": "to_value=lambda result: ... (result.left, result.right)",
                "left_time_ms": "left=Source(topic, time_ms=...)",
                "right_time_ms": "right=Source(topic, time_ms=...)",
                "left_id": "left=Source(topic, id=...)",
                "right_id": "right=Source(topic, id=...)",
            },
        )
        declared.check_batch_records(owner, batch_records)
        self.app = app
        self.name = name
        self.owner = owner
        self.batch_records = batch_records
        self.window = window
        self.kind = JoinKind(kind)
        self.output = output
        self.dead_letter_topic = dead_letter_topic
        self.on_record = on_record
        self.sources: dict[Side, Source] = {
            Side.LEFT: _with_old_keywords(owner, "left", as_source(left), left_time_ms, left_id),
            Side.RIGHT: _with_old_keywords(
                owner, "right", as_source(right), right_time_ms, right_id
            ),
        }
        self.to_value: Callable[[JoinResult[L, R]], Any]
        if to_value is not None and combine is not None:
            raise ValueError(f"{owner}: give to_value, not both to_value and combine")
        if combine is not None:
            old = combine
            self.to_value = lambda result: old(result.left, result.right)
        else:
            self.to_value = to_value or _left_and_right
        self.topics = {side: source.topic for side, source in self.sources.items()}
        self.names = {side: source.name for side, source in self.sources.items()}
        if self.names[Side.LEFT] == self.names[Side.RIGHT]:
            raise ValueError(f"{owner}: left and right must be different topics")
        self.side_of = {topic: side for side, topic in self.names.items()}
        self.partitions = declared.source_partitions(
            app, owner, partitions, list(self.topics.values())
        )
        self.raw_sources = app.topic(
            self.names[Side.LEFT], self.names[Side.RIGHT], partitions=self.partitions, **_io.RAW
        )
        table_options: dict[str, Any] = {
            "partitions": self.partitions,
            # Keys and values as JSON (Faust's choice for a str key type and no value type).
            "key_type": str,
        }
        self.left_table = app.Table(f"{name}-left", **table_options)
        self.right_table = app.Table(f"{name}-right", **table_options)
        left_store: Store = self.left_table
        right_store: Store = self.right_table
        if batch_records is not None:
            left_store, right_store = WriteBack(left_store), WriteBack(right_store)
        self.processor = JoinProcessor(
            window, self.kind, left_store, right_store, index=ExpiryIndex(expiry_bucket_ms)
        )
        declared.note_output(app, owner, output, self.partitions)
        declared.note_dead_letters(app, owner, dead_letter_topic)
        app.on_partitions_revoked.connect(self._forget)
        app.on_partitions_assigned.connect(self._forget)
        self.agent = app.agent(self.raw_sources, name=f"{name}-join")(self._run)

    # -- reading --

    def changelog_topics(self) -> list[str]:
        """The names of the two tables' changelog topics (left, right)."""
        return [t.changelog_topic.get_topic_name() for t in (self.left_table, self.right_table)]

    def late_counts(self) -> dict[str, int]:
        """Late records per side and partition (``left/p0``...), of this worker's partitions."""
        out: dict[str, int] = {}
        for side, table in ((Side.LEFT, self.left_table), (Side.RIGHT, self.right_table)):
            for key, value in table.items():
                if isinstance(key, str) and key.startswith("~late/"):
                    out[f"{side.value}/p{key.removeprefix('~late/')}"] = int(value)
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
        """Handle one source record (the record-at-a-time agent): join it, then expire what
        the clocks passed.

        A record that cannot be read meets the app's ``bad_record_policy`` (raises its
        `streamapp.joins.UndecodableRecord` under ``fail``).
        """
        if not await self._handle(message):
            return
        expiry = await self._sweep(message)
        if expiry is not None:
            await _io.flush_before_forgetting(self.app)
            expiry.apply()

    async def on_batch(self, batch: Batch) -> None:
        """Handle one batch of source records of one partition (``batch_records``).

        Raises what a record's handling raised (a bad record's error under ``fail``), the batch
        then written nowhere.
        """
        processor = self.processor
        handled = None
        try:
            for event in batch:
                if await self._handle(event.message):
                    handled = event.message
            # One sweep for the batch, once its records moved the clocks: its records saw what
            # it drops as gone already (`JoinProcessor.process`), as record by record.
            expiry = None if handled is None else await self._sweep(handled)
            if expiry is not None:
                # Under at-least-once the expired records leave the tables (below) only once
                # what was sent for them is out; under exactly_once the transaction does that.
                await _io.flush_before_forgetting(self.app)
                expiry.apply()
            processor.write_through()
        except BaseException:
            processor.discard()
            raise

    async def _handle(self, message: Any) -> bool:
        """Process one record: store it and emit its pairs (`_sweep` expires what is due).

        Returns False for a record that cannot be read, which went to ``bad_record_policy``
        with nothing stored.
        """
        side = self.side_of[message.topic]
        source = self.sources[side]
        try:
            read = read_record(self.app, self.owner, source, message)
        except UndecodableRecord as bad:
            await report(
                self.on_record,
                self.app,
                source.topic,
                side,
                message,
                Outcome.UNDECODABLE,
                None,
                bad,
            )
            await apply_bad_record_policy(self.app, message, bad, self.agent.name)
            return False
        key = _io.b64(message.key)
        assert key is not None
        entry = Entry(message.offset, read.time_ms, _io.b64(message.value), id=read.id)
        arrival = self.processor.process(side, message.partition, key, entry)
        if arrival.outcome is Outcome.LATE:
            if self.dead_letter_topic is not None:
                await _io.dead_letter_late(
                    self.app, message, self.dead_letter_topic, ("join", self.name), read.time_ms
                )
            self.processor.count_late(side, message.partition, message.offset)
        for pair in arrival.emitted:
            await self._emit(message, pair)
        # Before expiry: what the hook sends is flushed with the rest before state is forgotten.
        await report(self.on_record, self.app, source.topic, side, message, arrival.outcome, read)
        return True

    async def _sweep(self, message: Any) -> Expiry[Pair] | None:
        """Plan what the clocks expired in ``message``'s partition and emit its unmatched
        records on behalf of ``message``; returns the expiry to apply once what was sent is
        out (None if nothing expired)."""
        expiry = self.processor.plan_expiry(message.partition)
        if expiry.empty:
            return None
        for pair in expiry.emitted:
            await self._emit(message, pair)
        return expiry

    async def send(
        self,
        message: Any,
        topic: TopicT,
        *,
        key: Any,
        value: Any,
        headers: _io.Headers | None = None,
    ) -> None:
        """Send ``key`` and ``value`` (encoded with ``topic``'s codecs) on behalf of ``message``.

        ``message`` is the source record being processed (`JoinResult.message`,
        `SourceRecord.message`). Under exactly_once the record joins that record's transaction,
        which commits with its offset, whatever partition of ``topic`` it goes to. Raises what
        the codecs or the producer raise.
        """
        await _send(self.app, message, topic, key, value, headers)

    async def _emit(self, source: Any, pair: Pair) -> None:
        left = self._decode(Side.LEFT, pair.left)
        right = self._decode(Side.RIGHT, pair.right)
        side = Side.LEFT if pair.left is not None else Side.RIGHT
        key = _io.loads_key(self.app, self.topics[side], _io.unb64(pair.key))
        result: JoinResult[L, R] = JoinResult(
            key,
            left,
            right,
            pair.left.time_ms if pair.left else None,
            pair.right.time_ms if pair.right else None,
            source.partition,
            source,
        )
        await emit(self.app, self.output, source, key, result, self.to_value)

    def _decode(self, side: Side, entry: Entry | None) -> Any:
        if entry is None:
            return None
        return _io.loads_value(self.app, self.topics[side], _io.unb64(entry.value))


def _with_old_keywords(
    owner: str,
    role: str,
    source: Source,
    time_ms: Callable[[Any], int] | None,
    record_id: Callable[[Any], str] | None,
) -> Source:
    """``source`` with what a deprecated ``<role>_time_ms``/``<role>_id`` keyword gave."""
    if time_ms is not None:
        if source.time_ms is not None:
            raise ValueError(f"{owner}: {role}'s time_ms given twice ({role}_time_ms and Source)")
        source = Source(source.topic, time_ms, source.id)
    if record_id is not None:
        if source.id is not None:
            raise ValueError(f"{owner}: {role}'s id given twice ({role}_id and Source)")
        source = Source(source.topic, source.time_ms, record_id)
    return source


async def emit(
    app: AppT,
    output: Any,
    source: Any,
    key: Any,
    result: Any,
    to_value: Callable[[Any], Any],
) -> None:
    """Hand ``result`` to ``output``: a callback's call, or a topic's record keyed ``key`` with
    the value ``to_value(result)``, sent on behalf of ``source`` (the Faust message)."""
    if callable(output) and not isinstance(output, TopicT):
        done = output(result)
        if inspect.isawaitable(done):
            await done
        return
    await _io.send_output(
        app,
        source,
        output.get_topic_name(),
        _io.dumps_key(app, output, key),
        _io.dumps_value(app, output, to_value(result)),
    )


async def _send(
    app: AppT,
    message: Any,
    topic: TopicT,
    key: Any,
    value: Any,
    headers: _io.Headers | None,
) -> None:
    name = topic.get_topic_name()
    raw_key = _io.dumps_key(app, topic, key)
    raw_value = _io.dumps_value(app, topic, value)
    if headers:  # sent at once: a batch holds records without headers only
        await _io.send_raw(app, message, name, raw_key, raw_value, headers)
    else:
        await _io.send_output(app, message, name, raw_key, raw_value)


def windowed_join(
    app: AppT,
    name: str,
    *,
    left: TopicT,
    right: TopicT,
    window: JoinWindow,
    output: TopicT | Callable[[JoinResult[Any, Any]], Any],
    partitions: int,
    kind: JoinKind | str = JoinKind.INNER,
    combine: Callable[[Any, Any], Any] | None = None,
    left_time_ms: Callable[[Any], int] | None = None,
    right_time_ms: Callable[[Any], int] | None = None,
    dead_letter_topic: str | None = None,
    expiry_bucket_ms: int = 100,
    left_id: Callable[[Any], str] | None = None,
    right_id: Callable[[Any], str] | None = None,
    on_record: Callable[[SourceRecord], Any] | None = None,
    batch_records: int | None = None,
) -> WindowedJoin[Any, Any]:
    """Deprecated: declare the join with `WindowedJoin` (same arguments, event times and ids in
    `streamapp.joins.Source`, ``to_value`` for ``combine``). Warns, then declares it so."""
    deprecations.warn("windowed_join(...)", "WindowedJoin(...)")
    left_source = Source(left, left_time_ms, left_id)
    right_source = Source(right, right_time_ms, right_id)
    to_value = None
    if combine is not None:
        old = combine
        to_value = lambda result: old(result.left, result.right)  # noqa: E731
    return WindowedJoin(
        app,
        name,
        left=left_source,
        right=right_source,
        window=window,
        output=output,
        partitions=partitions,
        kind=kind,
        to_value=to_value,
        dead_letter_topic=dead_letter_topic,
        expiry_bucket_ms=expiry_bucket_ms,
        on_record=on_record,
        batch_records=batch_records,
    )


def __getattr__(name: str) -> Any:
    # The record ``on_record`` receives had this name here before it was shared by every join
    # and aggregate: kept for one release.
    if name == "JoinRecord":
        deprecations.warn(
            "streamapp.joins.stream_stream.JoinRecord", "streamapp.joins.SourceRecord"
        )
        return SourceRecord
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
