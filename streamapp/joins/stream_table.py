"""The stream-table join: enrich each record of a stream from a table another topic fills.

`stream_table_join(app, name, stream=orders, table_topic=customers, output=...)` keeps the
latest value of every key of ``table_topic`` in a changelog-backed table (a record with a
``None`` value deletes its key) and joins each ``stream`` record with the table's value for
its key *as it stands when the stream record is processed* (Kafka Streams' KStream-KTable
join): an inner join drops stream records whose key has no value, a left join emits them with
``None``. A later table update does not re-emit earlier stream records.

The table side is either

* co-partitioned (the default): ``stream`` and ``table_topic`` are consumed by one agent as
  ``app.topic(stream, table_topic, partitions=n)``, so they and the table's changelog are one
  co-partition group (checked at startup, kept together by the assignor) and each worker holds
  only its partitions of the table; both topics must be keyed by the join key with ``n``
  partitions; or
* global (``global_table=True``): every worker holds the whole table (a Faust GlobalTable,
  filled by its own agent and read back from its changelog by every worker), the topics need
  not be co-partitioned, and a stream record sees a table update once its changelog has
  reached the worker that processes it.

Batches: with ``batch_records=n`` the agents read their topics in batches of up to ``n`` records
(`streamapp.batches`); the table is read and written through a
`streamapp.joins.write_back.WriteBack` (a key updated several times in a batch is written once,
its last value), and a stream record with no key meets the app's ``bad_record_policy`` on its
own (`streamapp.bad_records.handle_record_error`).

Guarantees: as for the windowed join (at-least-once: nothing lost, a replayed stream record
is emitted again; exactly_once: once), record by record or over batches.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from faust.types import AppT, TopicT

from streamapp.bad_records import handle_record_error
from streamapp.batches import Batch, batches
from streamapp.joins import _io
from streamapp.joins.window import JoinKind
from streamapp.joins.write_back import WriteBack

__all__ = ["Enrichment", "StreamTableJoin", "TableLookup", "stream_table_join"]

KEY_PREFIX = "k/"


@dataclass(frozen=True)
class Enrichment:
    """One output: the stream record's key and value, with the table's value (or None)."""

    key: Any
    value: Any
    table_value: Any
    partition: int


def _default_combine(value: Any, table_value: Any) -> Any:
    return {"value": value, "table": table_value}


class TableLookup:
    """The pure rule over one key-value store (a table in a worker, a dict in tests)."""

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
        value = self.store.get(KEY_PREFIX + key)
        if value is None and self.kind is JoinKind.INNER:
            return False, None
        return True, value


class StreamTableJoin:
    """A declared stream-table join on ``app`` (see the module and docs/joins.md); also
    reachable as `stream_table_join`.

    ``partitions`` is the stream's partition count (and the table's, co-partitioned);
    ``table_partitions`` the table topic's, for a global table (default: ``partitions``).
    ``combine(value, table_value)`` makes the output value (default: a dict of both).
    ``batch_records``: read the topics in batches of up to that many records (see the module;
    default: record by record).
    """

    def __init__(
        self,
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
        combine: Callable[[Any, Any], Any] = _default_combine,
        batch_records: int | None = None,
    ) -> None:
        if batch_records is not None and batch_records < 1:
            raise ValueError(f"join {name}: batch_records must be at least 1, not {batch_records}")
        self.app = app
        self.batch_records = batch_records
        self.name = name
        self.stream = stream
        self.table_topic = table_topic
        self.output = output
        self.combine = combine
        self.stream_name = stream.get_topic_name()
        self.table_topic_name = table_topic.get_topic_name()
        options: dict[str, Any] = {
            # Keys and values as JSON (Faust's choice for a str key type and no value type).
            "key_type": str,
        }
        if global_table:
            self.table = app.GlobalTable(
                f"{name}-table", partitions=table_partitions or partitions, **options
            )
            fill = app.topic(
                self.table_topic_name, partitions=table_partitions or partitions, **_io.RAW
            )
            source = app.topic(self.stream_name, partitions=partitions, **_io.RAW)
            self.agents = [
                app.agent(fill, name=f"{name}-fill")(self._run),
                app.agent(source, name=f"{name}-enrich")(self._run),
            ]
        else:
            self.table = app.Table(f"{name}-table", partitions=partitions, **options)
            both = app.topic(
                self.stream_name, self.table_topic_name, partitions=partitions, **_io.RAW
            )
            self.agents = [app.agent(both, name=f"{name}-join")(self._run)]
        # Over batches, table-topic records update the table through a write-back store, whose
        # changes are written at the end of each batch of the agent that made them: the one
        # agent's (co-partitioned), or the fill agent's (global, read as it is by the other).
        self.write_back = WriteBack(self.table) if batch_records is not None else None
        updated: MutableMapping[str, Any] = self.write_back or self.table
        self.updates = TableLookup(kind, updated)
        self.lookup = TableLookup(kind, self.table) if global_table else self.updates

    async def _run(self, stream: Any) -> None:
        if self.batch_records is not None:
            async for batch in batches(stream, max_records=self.batch_records):
                await self.on_batch(batch)
            return
        async for event in stream.events():
            await self.on_message(event.message)

    async def on_batch(self, batch: Batch) -> None:
        """Handle one batch of records of one partition (``batch_records``)."""
        writes = self.write_back if self._writes_in(batch.tp.topic) else None
        try:
            for event in batch:
                message = event.message
                if message.key is None:
                    error = self._no_key(message)
                    if not await handle_record_error(
                        self.app, message, error, self._agent_of(message.topic)
                    ):
                        raise error
                    continue
                await self.on_message(message)
            if writes is not None:
                writes.write_through()
        except BaseException:
            if writes is not None:
                writes.discard()
            raise

    def _writes_in(self, topic: str) -> bool:
        """Whether the agent reading ``topic`` updates the table (through `write_back`)."""
        return self.lookup is self.updates or topic == self.table_topic_name

    def _agent_of(self, topic: str) -> str:
        if self.lookup is self.updates:
            return f"{self.name}-join"
        return f"{self.name}-fill" if topic == self.table_topic_name else f"{self.name}-enrich"

    def _no_key(self, message: Any) -> ValueError:
        return ValueError(
            f"join {self.name}: {message.topic}[{message.partition}]@{message.offset} "
            "has no key; a join needs keyed records"
        )

    async def on_message(self, message: Any) -> None:
        if message.key is None:
            raise self._no_key(message)
        key = _io.b64(message.key)
        assert key is not None
        if message.topic == self.table_topic_name:
            self.updates.update(key, _io.b64(message.value))
            return
        emit, stored = self.lookup.lookup(key)
        if not emit:
            return
        app = self.app
        decoded_key = _io.loads_key(app, self.stream, message.key)
        value = _io.loads_value(app, self.stream, message.value)
        table_value = _io.loads_value(app, self.table_topic, _io.unb64(stored))
        if callable(self.output) and not isinstance(self.output, TopicT):
            done = self.output(Enrichment(decoded_key, value, table_value, message.partition))
            if inspect.isawaitable(done):
                await done
            return
        out = self.output
        await _io.send_output(
            app,
            message,
            out.get_topic_name(),
            _io.dumps_key(app, out, decoded_key),
            _io.dumps_value(app, out, self.combine(value, table_value)),
        )


#: Declares a stream-table join on an app: the class's constructor, under the name the docs use.
stream_table_join = StreamTableJoin
