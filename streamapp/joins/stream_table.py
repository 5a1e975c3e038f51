"""The stream-table join: enrich each record of a stream from a table another topic fills.

`StreamTableJoin(app, name, stream=orders, table=customers, output=...)` keeps the table's
values in a changelog-backed table (a record with a ``None`` value deletes its key) and joins
each ``stream`` record with the table's value for its key:

* the latest value, *as the table stands when the stream record is processed* (Kafka Streams'
  KStream-KTable join; `TableLookup`); or, with ``history_ms``,
* the value *valid at the stream record's event time* (a temporal, or as-of, join; Kafka
  Streams' versioned tables, KIP-889): the table keeps each key's history for ``history_ms``,
  and a stream record older than that is late (`streamapp.joins.temporal.TableHistory`).

An inner join drops stream records whose key has no value, a left join emits them with
``None``. A later table update does not re-emit earlier stream records.

Every record, of either topic, is read when it arrives (`streamapp.joins.sources.read_record`):
key and value decoded with its own topic's codecs, event time taken. One that cannot be read
(a table record included) is reported to ``on_record`` as ``UNDECODABLE`` and handed to the
app's ``bad_record_policy`` before anything is stored: the table keeps the key's last good
value, and every value the table holds decodes.

The table side is either

* co-partitioned (the default): ``stream`` and ``table`` are consumed by one agent as
  ``app.topic(stream, table, partitions=n)``, so they and the table's changelog are one
  co-partition group (checked at startup, kept together by the assignor) and each worker holds
  only its partitions of the table; both topics must be keyed by the join key with ``n``
  partitions; or
* global (``global_table=True``, latest values only): every worker holds the whole table (a
  Faust GlobalTable, filled by its own agent and read back from its changelog by every worker),
  the topics need not be co-partitioned, and a stream record sees a table update once its
  changelog has reached the worker that processes it.

Batches: with ``batch_records=n`` the agents read their topics in batches of up to ``n`` records
(`streamapp.batches`); the table is read and written through a
`streamapp.joins.write_back.WriteBack` (a key updated several times in a batch is written once).

Guarantees: as for the windowed join (at-least-once: nothing lost, a replayed stream record
is emitted again; exactly_once: once), record by record or over batches.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from faust.types import AppT, TopicT

from streamapp.batches import Batch, batches
from streamapp.joins import _io, declared, deprecations
from streamapp.joins.outcome import Outcome
from streamapp.joins.sources import (
    OnRecord,
    Read,
    Source,
    UndecodableRecord,
    apply_bad_record_policy,
    as_source,
    read_record,
    report,
)
from streamapp.joins.stream_stream import _send, emit
from streamapp.joins.temporal import TableHistory, versions_of
from streamapp.joins.window import JoinKind
from streamapp.joins.write_back import WriteBack

__all__ = ["Enrichment", "StreamTableJoin", "TableLookup", "stream_table_join"]

KEY_PREFIX = "k/"
STREAM, TABLE = "stream", "table"


@dataclass(frozen=True)
class Enrichment:
    """One output of a stream-table join: the stream record's key and value, with the table's
    value (None for a left join's record with none).

    ``partition``: the stream record's partition; ``time_ms``: its event time; ``message``: the
    stream record (a Faust message): pass it to `StreamTableJoin.send` to send on its behalf.
    """

    key: Any
    value: Any
    table_value: Any
    partition: int
    time_ms: int | None = None
    message: Any = None


def _value_and_table(result: Enrichment) -> Any:
    return {"value": result.value, "table": result.table_value}


class TableLookup:
    """The latest-value rule over one key-value store (a table in a worker, a dict in tests).

    ``kind``: ``"inner"`` or ``"left"``; raises ValueError for ``"outer"``.
    """

    def __init__(self, kind: JoinKind | str, store: MutableMapping[str, Any]) -> None:
        self.kind = JoinKind(kind)
        if self.kind is JoinKind.OUTER:
            raise ValueError("a stream-table join is inner or left")
        self.store = store

    def update(self, key: str, value: Any) -> None:
        """A table-topic record: the latest value wins; ``None`` deletes the key."""
        if value is None:
            if KEY_PREFIX + key in self.store:
                del self.store[KEY_PREFIX + key]
        else:
            self.store[KEY_PREFIX + key] = value

    def lookup(self, key: str) -> tuple[bool, Any]:
        """A stream record: (whether to emit it, the table value to emit it with)."""
        versions = versions_of(self.store.get(KEY_PREFIX + key))  # a temporal join's, too
        value = versions[-1][1] if versions else None
        if value is None and self.kind is JoinKind.INNER:
            return False, None
        return True, value


class StreamTableJoin:
    """A stream-table join declared on ``app`` (see the module and docs/joins.md).

    Arguments:

    - ``app``: a `streamapp.App`; ``name``: the join's name (its table is ``<name>-table``).
    - ``stream``: the stream enriched, a topic keyed by the join key or a
      `streamapp.joins.Source` (with ``time_ms``, its records' event time); ``table``: the topic
      filling the table, or a `Source` (``time_ms``: when each table value starts to hold).
      Record ids (``Source(id=...)``) are refused: the join holds no stream records, and a
      table's key is its records' identity.
    - ``output``: a topic (each result's value is ``to_value(result)``, by default
      ``{"value": ..., "table": ...}``) or a callback, plain or async, taking an `Enrichment`.
    - ``kind``: ``"inner"`` (stream records without a table value are dropped) or ``"left"``.
    - ``partitions``: the stream's partition count (and the table's, co-partitioned); by
      default the count the topics declare, else the app's ``topic_partitions``.
    - ``history_ms``: make it temporal: each stream record meets the table value valid at its
      event time, the table keeping each key's history that long (see
      `streamapp.joins.temporal`).
    - ``global_table``: keep the whole table on every worker (latest values only);
      ``table_partitions``: the table topic's partition count then (default: ``partitions``).
    - ``on_record``: called, plain or async, with a `streamapp.joins.SourceRecord` for every
      record of both topics once handled.
    - ``batch_records``: read the topics in batches of up to that many records.
    - ``dead_letter_topic``: where late stream records go, as they came (temporal joins only).

    Deprecated (one release): ``table_topic`` (use ``table``), ``combine(value, table_value)``
    (use ``to_value(result)``).

    Raises ValueError for an outer join, a ``Source`` with ``id``, ``history_ms`` with a global
    table, ``dead_letter_topic`` without ``history_ms``, or a bad ``batch_records`` or
    ``partitions``; TypeError without a ``table``.
    """

    def __init__(
        self,
        app: AppT,
        name: str,
        *,
        stream: TopicT | Source,
        table: TopicT | Source | None = None,
        output: TopicT | Callable[[Enrichment], Any],
        kind: JoinKind | str = JoinKind.INNER,
        partitions: int | None = None,
        history_ms: int | None = None,
        global_table: bool = False,
        table_partitions: int | None = None,
        to_value: Callable[[Enrichment], Any] | None = None,
        on_record: OnRecord | None = None,
        batch_records: int | None = None,
        dead_letter_topic: str | None = None,
        table_topic: TopicT | None = None,
        combine: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        owner = f"join {name}"
        deprecations.renamed(
            "StreamTableJoin",
            {"table_topic": table_topic, "combine": combine},
            {
                "table_topic": "table=",
                "combine": "to_value=lambda result: ... (result.value, result.table_value)",
            },
        )
        if table is None and table_topic is None:
            raise TypeError(f"{owner}: the table's topic is missing: pass table=")
        if table is not None and table_topic is not None:
            raise ValueError(f"{owner}: give table, not both table and table_topic")
        declared.check_batch_records(owner, batch_records)
        self.app = app
        self.name = name
        self.owner = owner
        self.batch_records = batch_records
        self.kind = JoinKind(kind)
        self.output = output
        self.on_record = on_record
        self.history_ms = history_ms
        self.dead_letter_topic = dead_letter_topic
        filled_by = table if table is not None else table_topic
        assert filled_by is not None
        self.sources = {STREAM: as_source(stream), TABLE: as_source(filled_by)}
        for role, source in self.sources.items():
            if source.id is not None:
                raise ValueError(
                    f"{owner}: the {role} has an id, but a stream-table join has no duplicates "
                    "to find (it holds no stream records; a table's key is its records' "
                    "identity): drop id="
                )
        if history_ms is not None and global_table:
            raise ValueError(f"{owner}: a temporal join (history_ms) needs a co-partitioned table")
        if dead_letter_topic is not None and history_ms is None:
            raise ValueError(
                f"{owner}: only a temporal join (history_ms) has late records; without "
                "history_ms, dead_letter_topic would never receive one"
            )
        if to_value is not None and combine is not None:
            raise ValueError(f"{owner}: give to_value, not both to_value and combine")
        self.to_value: Callable[[Enrichment], Any]
        if combine is not None:
            old = combine
            self.to_value = lambda result: old(result.value, result.table_value)
        else:
            self.to_value = to_value or _value_and_table
        self.stream = self.sources[STREAM].topic
        self.table_topic = self.sources[TABLE].topic
        self.stream_name = self.sources[STREAM].name
        self.table_topic_name = self.sources[TABLE].name
        if self.stream_name == self.table_topic_name:
            raise ValueError(f"{owner}: stream and table must be different topics")
        topics = [self.stream] if global_table else [self.stream, self.table_topic]
        self.partitions = declared.source_partitions(app, owner, partitions, topics)
        options: dict[str, Any] = {
            # Keys and values as JSON (Faust's choice for a str key type and no value type).
            "key_type": str,
        }
        if global_table:
            fill_partitions = table_partitions or int(self.table_topic.partitions or 0)
            fill_partitions = fill_partitions or self.partitions
            self.table = app.GlobalTable(f"{name}-table", partitions=fill_partitions, **options)
            fill = app.topic(self.table_topic_name, partitions=fill_partitions, **_io.RAW)
            enrich = app.topic(self.stream_name, partitions=self.partitions, **_io.RAW)
            self.agents = [
                app.agent(fill, name=f"{name}-fill")(self._run),
                app.agent(enrich, name=f"{name}-enrich")(self._run),
            ]
        else:
            self.table = app.Table(f"{name}-table", partitions=self.partitions, **options)
            both = app.topic(
                self.stream_name, self.table_topic_name, partitions=self.partitions, **_io.RAW
            )
            self.agents = [app.agent(both, name=f"{name}-join")(self._run)]
        # Over batches, table-topic records update the table through a write-back store, whose
        # changes are written at the end of each batch of the agent that made them: the one
        # agent's (co-partitioned), or the fill agent's (global, read as it is by the other).
        self.write_back = WriteBack(self.table) if batch_records is not None else None
        updated: MutableMapping[str, Any] = self.write_back or self.table
        self.updates = TableLookup(self.kind, updated)
        self.lookup = TableLookup(self.kind, self.table) if global_table else self.updates
        self.history = (
            TableHistory(self.kind, updated, history_ms) if history_ms is not None else None
        )
        declared.note_output(app, owner, output, self.partitions)
        declared.note_dead_letters(app, owner, dead_letter_topic)
        app.on_partitions_revoked.connect(self._forget)
        app.on_partitions_assigned.connect(self._forget)

    # -- reading --

    def late_counts(self) -> dict[str, int]:
        """Late stream records per partition (``p0``...), of this worker's partitions (a
        temporal join's; always empty without ``history_ms``)."""
        out: dict[str, int] = {}
        for key, value in list(self.table.items()):
            if isinstance(key, str) and key.startswith("~late/"):
                out[f"p{key.removeprefix('~late/')}"] = int(value)
        return out

    # -- the agents --

    def _forget(self, sender: Any, /, *args: Any, **kwargs: Any) -> None:
        if self.history is not None:
            self.history.forget()

    async def _run(self, stream: Any) -> None:
        if self.batch_records is not None:
            async for batch in batches(stream, max_records=self.batch_records):
                await self.on_batch(batch)
            return
        async for event in stream.events():
            await self.on_message(event.message)

    async def on_batch(self, batch: Batch) -> None:
        """Handle one batch of records of one partition (``batch_records``).

        Raises what a record's handling raised (a bad record's error under ``fail``), the
        batch's table writes then discarded.
        """
        writes = self.write_back if self._writes_in(batch.tp.topic) else None
        try:
            for event in batch:
                await self._handle(event.message)
            if self.history is not None:
                self.history.expire(batch.tp.partition)
            if writes is not None:
                writes.write_through()
        except BaseException:
            if writes is not None:
                writes.discard()
            if self.history is not None:
                self.history.forget()
            raise

    def _writes_in(self, topic: str) -> bool:
        """Whether the agent reading ``topic`` updates the table (through `write_back`)."""
        return self.lookup is self.updates or topic == self.table_topic_name

    def _agent_of(self, topic: str) -> str:
        if self.lookup is self.updates:
            return f"{self.name}-join"
        return f"{self.name}-fill" if topic == self.table_topic_name else f"{self.name}-enrich"

    async def on_message(self, message: Any) -> None:
        """Handle one record of either topic (the record-at-a-time agents).

        A record that cannot be read meets the app's ``bad_record_policy`` (raises its
        `streamapp.joins.UndecodableRecord` under ``fail``).
        """
        await self._handle(message)
        if self.history is not None and message.topic == self.table_topic_name:
            self.history.expire(message.partition)

    async def _handle(self, message: Any) -> None:
        role = TABLE if message.topic == self.table_topic_name else STREAM
        source = self.sources[role]
        try:
            read = read_record(self.app, self.owner, source, message, deletions=role == TABLE)
        except UndecodableRecord as bad:
            await report(
                self.on_record,
                self.app,
                source.topic,
                role,
                message,
                Outcome.UNDECODABLE,
                None,
                bad,
            )
            await apply_bad_record_policy(self.app, message, bad, self._agent_of(message.topic))
            return
        key = _io.b64(message.key)
        assert key is not None
        if role == TABLE:
            stored = _io.b64(message.value)
            if self.history is not None:
                self.history.update(message.partition, key, read.time_ms, stored)
            else:
                self.updates.update(key, stored)
            await report(
                self.on_record, self.app, source.topic, role, message, Outcome.ACCEPTED, read
            )
            return
        outcome = await self._enrich(message, key, read)
        await report(self.on_record, self.app, source.topic, role, message, outcome, read)

    async def _enrich(self, message: Any, key: str, read: Read) -> Outcome:
        """Join one stream record with the table; returns its outcome."""
        if self.history is not None:
            outcome, stored = self.history.lookup(message.partition, key, read.time_ms)
            emit_it = self.history.emits(outcome)
            if outcome is Outcome.LATE:
                if self.dead_letter_topic is not None:
                    await _io.dead_letter_late(
                        self.app, message, self.dead_letter_topic, ("join", self.name), read.time_ms
                    )
                self.history.count_late(message.partition)
        else:
            emit_it, stored = self.lookup.lookup(key)
            outcome = Outcome.UNMATCHED if stored is None else Outcome.ACCEPTED
        if not emit_it:
            return outcome
        table_value = _io.loads_value(self.app, self.table_topic, _io.unb64(stored))
        result = Enrichment(
            read.key, read.value, table_value, message.partition, read.time_ms, message
        )
        await emit(self.app, self.output, message, read.key, result, self.to_value)
        return outcome

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
        (`Enrichment.message`, `streamapp.joins.SourceRecord.message`): under exactly_once in
        that record's transaction. Raises what the codecs or the producer raise."""
        await _send(self.app, message, topic, key, value, headers)


def stream_table_join(
    app: AppT,
    name: str,
    *,
    stream: TopicT,
    table_topic: TopicT,
    output: TopicT | Callable[[Enrichment], Any],
    partitions: int,
    global_table: bool = False,
    table_partitions: int | None = None,
    kind: JoinKind | str = JoinKind.INNER,
    combine: Callable[[Any, Any], Any] | None = None,
    batch_records: int | None = None,
) -> StreamTableJoin:
    """Deprecated: declare the join with `StreamTableJoin` (``table=`` for ``table_topic``,
    ``to_value`` for ``combine``). Warns, then declares it so."""
    deprecations.warn("stream_table_join(...)", "StreamTableJoin(...)")
    to_value = None
    if combine is not None:
        old = combine
        to_value = lambda result: old(result.value, result.table_value)  # noqa: E731
    return StreamTableJoin(
        app,
        name,
        stream=stream,
        table=table_topic,
        output=output,
        partitions=partitions,
        global_table=global_table,
        table_partitions=table_partitions,
        kind=kind,
        to_value=to_value,
        batch_records=batch_records,
    )
