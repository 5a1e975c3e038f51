"""The windowed stream-stream join as a Faust agent and two changelog-backed tables.

`windowed_join(app, name, left=..., right=..., window=..., output=...)` declares:

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

Output: each pair (and, for left and outer joins, each unmatched record once it has expired)
goes to ``output``: a topic (the value ``combine(left, right)``, the key the source key) or an
async or plain callback taking a `JoinResult`. Late records are counted per partition and, with
``dead_letter_topic``, sent there as they came (bytes untouched, headers saying why).

Hooks: ``on_record`` sees every source record once it is handled, with its outcome (accepted,
late, replay, skipped, duplicate or undecodable), to count or to send what the record itself
causes; ``left_id``/``right_id`` name what a record is about, so that a second record about the
same thing is reported as a duplicate instead of joined. `WindowedJoin.send` sends a record on
behalf of the source record, in its transaction under exactly_once.

Batches: with ``batch_records=n`` the agent reads its sources in batches of up to ``n`` records
(`streamapp.batches`) and handles a batch at once: the records one by one, as above, but the
tables read and written through a `streamapp.joins.write_back.WriteBack` (each changed entry
written once per batch, so one changelog record per entry rather than per write), one expiry
sweep per batch once its records are handled (what it drops counts as gone for them already,
so they are joined as record by record) and, under at-least-once, one producer flush per batch
before the expired records are deleted. A record that does not decode or has no key meets the app's
``bad_record_policy`` on its own (`streamapp.bad_records.handle_record_error`); any other error
stops the worker, the batch unacknowledged.

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

from streamapp.bad_records import handle_record_error
from streamapp.batches import Batch, batches
from streamapp.joins import _io
from streamapp.joins.core import (
    Entry,
    Expiry,
    ExpiryIndex,
    JoinProcessor,
    Outcome,
    Pair,
    Store,
)
from streamapp.joins.window import JoinKind, JoinWindow, Side
from streamapp.joins.write_back import WriteBack

__all__ = ["JoinRecord", "JoinResult", "WindowedJoin", "windowed_join"]

L = TypeVar("L")
R = TypeVar("R")


@dataclass(frozen=True)
class JoinResult(Generic[L, R]):
    """One output: a pair, or an unmatched record (the other side None)."""

    key: Any
    left: L | None
    right: R | None
    left_time_ms: int | None
    right_time_ms: int | None
    partition: int
    #: The source record (a Faust message) being processed when this was emitted: pass it to
    #: `WindowedJoin.send` to send more on its behalf.
    message: Any = None


@dataclass(frozen=True)
class JoinRecord:
    """One source record as the join handled it (what ``on_record`` receives).

    ``outcome``: ``ACCEPTED`` (stored; its pairs emitted), ``LATE`` (more than grace behind its
    side's clock), ``REPLAY`` (processed before a crash and still stored: its pairs emitted
    again), ``SKIPPED`` (processed before and gone), ``DUPLICATE`` (its id is that of a record
    still stored on its side) or ``UNDECODABLE`` (its value did not decode, or its time or id
    could not be read: ``value`` is None, ``error`` says why, and the exception goes on to the
    app's ``bad_record_policy`` after the hook returns).
    """

    side: Side
    key: Any
    value: Any
    time_ms: int | None
    partition: int
    outcome: Outcome
    message: Any
    error: Exception | None = None


def _default_combine(left: Any, right: Any) -> Any:
    return {"left": left, "right": right}


class _BadRecord(Exception):
    """A source record the join cannot handle (no key, or it does not decode): ``error`` is
    what the app's ``bad_record_policy`` is given."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class WindowedJoin(Generic[L, R]):
    """A declared windowed join; see the module. Build it with `windowed_join`."""

    def __init__(
        self,
        app: AppT,
        name: str,
        *,
        left: TopicT,
        right: TopicT,
        window: JoinWindow,
        output: TopicT | Callable[[JoinResult[L, R]], Any],
        partitions: int,
        kind: JoinKind | str = JoinKind.INNER,
        combine: Callable[[L | None, R | None], Any] = _default_combine,
        left_time_ms: Callable[[L], int] | None = None,
        right_time_ms: Callable[[R], int] | None = None,
        dead_letter_topic: str | None = None,
        expiry_bucket_ms: int = 100,
        left_id: Callable[[L], str] | None = None,
        right_id: Callable[[R], str] | None = None,
        on_record: Callable[[JoinRecord], Any] | None = None,
        batch_records: int | None = None,
    ) -> None:
        if batch_records is not None and batch_records < 1:
            raise ValueError(f"join {name}: batch_records must be at least 1, not {batch_records}")
        self.app = app
        self.batch_records = batch_records
        self.name = name
        self.window = window
        self.kind = JoinKind(kind)
        self.partitions = partitions
        self.combine = combine
        self.output = output
        self.dead_letter_topic = dead_letter_topic
        self.topics = {Side.LEFT: left, Side.RIGHT: right}
        self.time_of: dict[Side, Callable[[Any], int] | None] = {
            Side.LEFT: left_time_ms,
            Side.RIGHT: right_time_ms,
        }
        self.id_of: dict[Side, Callable[[Any], str] | None] = {
            Side.LEFT: left_id,
            Side.RIGHT: right_id,
        }
        self.on_record = on_record
        self.names = {side: topic.get_topic_name() for side, topic in self.topics.items()}
        if self.names[Side.LEFT] == self.names[Side.RIGHT]:
            raise ValueError(f"join {name}: left and right must be different topics")
        self.side_of = {topic: side for side, topic in self.names.items()}
        self.sources = app.topic(
            self.names[Side.LEFT], self.names[Side.RIGHT], partitions=partitions, **_io.RAW
        )
        table_options: dict[str, Any] = {
            "partitions": partitions,
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
            window,
            self.kind,
            left_store,
            right_store,
            index=ExpiryIndex(expiry_bucket_ms),
        )
        app.on_partitions_revoked.connect(self._forget)
        app.on_partitions_assigned.connect(self._forget)
        self.agent = app.agent(self.sources, name=f"{name}-join")(self._run)

    # -- reading --

    def changelog_topics(self) -> list[str]:
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
        """Handle one source record (the record-at-a-time agent)."""
        try:
            await self._handle(message)
        except _BadRecord as bad:
            raise bad.error from None  # to bad_record_policy, as the agent raised it
        expiry = await self._sweep(message)
        if expiry is not None:
            await _io.flush_before_forgetting(self.app)
            expiry.apply()

    async def on_batch(self, batch: Batch) -> None:
        """Handle one batch of source records of one partition (``batch_records``)."""
        processor = self.processor
        handled = None
        try:
            for event in batch:
                message = event.message
                try:
                    await self._handle(message)
                except _BadRecord as bad:
                    if not await handle_record_error(self.app, message, bad.error, self.agent.name):
                        raise bad.error from None
                    continue
                handled = message
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

    async def _handle(self, message: Any) -> None:
        """Process one record: store it and emit its pairs (`_sweep` expires what is due).

        Raises `_BadRecord` for a record with no key or that does not decode, before anything
        is stored.
        """
        side = self.side_of[message.topic]
        if message.key is None:
            raise _BadRecord(
                ValueError(
                    f"join {self.name}: {message.topic}[{message.partition}]@{message.offset} "
                    "has no key; a join needs keyed records"
                )
            )
        topic = self.topics[side]
        time_of, id_of = self.time_of[side], self.id_of[side]
        value: Any = None
        time_ms: int | None = None
        try:
            if time_of is not None or id_of is not None or self.on_record is not None:
                value = _io.loads_value(self.app, topic, message.value)
            time_ms = int(time_of(value)) if time_of is not None else _io.event_time_ms(message)
            record_id = str(id_of(value)) if id_of is not None else None
        except Exception as exc:
            # Nothing was stored: report it, then let bad_record_policy skip or dead-letter it.
            await self._report(side, message, None, None, Outcome.UNDECODABLE, exc)
            raise _BadRecord(exc) from exc
        key = _io.b64(message.key)
        assert key is not None
        entry = Entry(message.offset, time_ms, _io.b64(message.value), id=record_id)
        arrival = self.processor.process(side, message.partition, key, entry)
        if arrival.outcome is Outcome.LATE:
            if self.dead_letter_topic is not None:
                await _io.dead_letter_late(
                    self.app, message, self.dead_letter_topic, ("join", self.name), time_ms
                )
            self.processor.count_late(side, message.partition, message.offset)
        for pair in arrival.pairs:
            await self._emit(message, pair)
        # Before expiry: what the hook sends is flushed with the rest before state is forgotten.
        await self._report(side, message, value, time_ms, arrival.outcome)

    async def _sweep(self, message: Any) -> Expiry | None:
        """Plan what the clocks expired in ``message``'s partition and emit its unmatched
        records on behalf of ``message``; returns the expiry to apply once what was sent is
        out (None if nothing expired)."""
        expiry = self.processor.plan_expiry(message.partition)
        if expiry.empty:
            return None
        for pair in expiry.unmatched:
            await self._emit(message, pair)
        return expiry

    async def _report(
        self,
        side: Side,
        message: Any,
        value: Any,
        time_ms: int | None,
        outcome: Outcome,
        error: Exception | None = None,
    ) -> None:
        if self.on_record is None:
            return
        try:
            key = _io.loads_key(self.app, self.topics[side], message.key)
        except Exception:
            key = message.key  # an undecodable record's key may not decode either: as it came
        record = JoinRecord(side, key, value, time_ms, message.partition, outcome, message, error)
        done = self.on_record(record)
        if inspect.isawaitable(done):
            await done

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
        `JoinRecord.message`). Under exactly_once the record joins that record's transaction,
        which commits with its offset, whatever partition of ``topic`` it goes to.
        """
        name = topic.get_topic_name()
        raw_key = _io.dumps_key(self.app, topic, key)
        raw_value = _io.dumps_value(self.app, topic, value)
        if headers:  # sent at once: a batch holds records without headers only
            await _io.send_raw(self.app, message, name, raw_key, raw_value, headers)
        else:
            await _io.send_output(self.app, message, name, raw_key, raw_value)

    async def _emit(self, source: Any, pair: Pair) -> None:
        left = self._decode(Side.LEFT, pair.left)
        right = self._decode(Side.RIGHT, pair.right)
        known = pair.left if pair.left is not None else pair.right
        assert known is not None
        side = Side.LEFT if pair.left is not None else Side.RIGHT
        key = _io.loads_key(self.app, self.topics[side], _io.unb64(pair.key))
        if callable(self.output) and not isinstance(self.output, TopicT):
            result = JoinResult(
                key,
                left,
                right,
                pair.left.time_ms if pair.left else None,
                pair.right.time_ms if pair.right else None,
                source.partition,
                source,
            )
            done = self.output(result)
            if inspect.isawaitable(done):
                await done
            return
        out = self.output
        await _io.send_output(
            self.app,
            source,
            out.get_topic_name(),
            _io.dumps_key(self.app, out, key),
            _io.dumps_value(self.app, out, self.combine(left, right)),
        )

    def _decode(self, side: Side, entry: Entry | None) -> Any:
        if entry is None:
            return None
        return _io.loads_value(self.app, self.topics[side], _io.unb64(entry.value))


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
    combine: Callable[[Any, Any], Any] = _default_combine,
    left_time_ms: Callable[[Any], int] | None = None,
    right_time_ms: Callable[[Any], int] | None = None,
    dead_letter_topic: str | None = None,
    expiry_bucket_ms: int = 100,
    left_id: Callable[[Any], str] | None = None,
    right_id: Callable[[Any], str] | None = None,
    on_record: Callable[[JoinRecord], Any] | None = None,
    batch_records: int | None = None,
) -> WindowedJoin[Any, Any]:
    """Declare a windowed stream-stream join on ``app`` (see the module and docs/joins.md).

    ``left`` and ``right`` are topics keyed by the join key, each with its own codecs;
    ``partitions`` is their partition count, which the join's tables take too. Event time is
    ``left_time_ms(value)`` / ``right_time_ms(value)``, or the record's Kafka timestamp.
    ``kind``: ``"inner"``, ``"left"`` or ``"outer"``. ``left_id(value)`` / ``right_id(value)``:
    what a record is about; a record whose id is that of one still stored on its side is a
    duplicate (not joined). ``on_record(JoinRecord)``: called, plain or async, for every
    source record once handled (see `JoinRecord`). ``batch_records``: read the sources in
    batches of up to that many records (see the module; default: record by record).
    """
    return WindowedJoin(
        app,
        name,
        left=left,
        right=right,
        window=window,
        output=output,
        partitions=partitions,
        kind=kind,
        combine=combine,
        left_time_ms=left_time_ms,
        right_time_ms=right_time_ms,
        dead_letter_topic=dead_letter_topic,
        expiry_bucket_ms=expiry_bucket_ms,
        left_id=left_id,
        right_id=right_id,
        on_record=on_record,
        batch_records=batch_records,
    )
