"""A windowed aggregate as a Faust agent and one changelog-backed table.

`windowed_aggregate(app, name, source=..., windows=..., initial=..., fold=...)` declares:

* one agent consuming ``source`` (as raw bytes, decoded with the source topic's own codecs);
* one table, ``<name>-windows``, with the source's partition count: its changelog joins the
  source's co-partition group (a table declared with the source's count follows it), so a
  worker that takes partition *p* of the source restores partition *p* of the windows;
* the aggregate itself, decided by `streamapp.aggregates.core.AggregateProcessor` (see
  `streamapp.aggregates.window` for the windows, lateness and closing).

Why not Faust's windowed tables (``app.Table(...).tumbling(...)``)? They expire windows by the
wall clock (``time.time()`` in ``Collection._del_old_keys``), not by event time; they have no
grace period and no notion of a late record; their ``on_window_close`` fires from that
wall-clock timer; and their expiry heap lives in memory only, filled by writes, so windows
restored from RocksDB or the changelog never expire (faust-streaming/faust #385). Here the
clock, the windows and the expiry index are all table entries: a recovered worker closes the
recovered windows as soon as its clock passes them.

Output: each window's final value, once the partition's clock has passed its end plus the
grace, goes to ``output``: a topic (the value ``to_value(result)``, by default ``{"start":
..., "end": ..., "value": ...}``; the key the source key) or an async or plain callback taking
a `WindowResult`. Open windows are readable too (`WindowedAggregate.current`). Late records
are counted per partition and, with ``dead_letter_topic``, sent there as they came.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from faust.types import AppT, TopicT

from streamapp.aggregates.core import AggregateProcessor, ClosedWindow, Outcome
from streamapp.aggregates.window import Windows
from streamapp.joins import _io

__all__ = ["WindowResult", "WindowedAggregate", "windowed_aggregate", "windowed_count"]

V = TypeVar("V")
A = TypeVar("A")


@dataclass(frozen=True)
class WindowResult(Generic[A]):
    """A window's final value: key (decoded), ``[start_ms, end_ms)``, the accumulator."""

    key: Any
    start_ms: int
    end_ms: int
    value: A
    partition: int


def _default_to_value(result: WindowResult[Any]) -> Any:
    return {"start": result.start_ms, "end": result.end_ms, "value": result.value}


class WindowedAggregate(Generic[V, A]):
    """A declared windowed aggregate; see the module. Build it with `windowed_aggregate`."""

    def __init__(
        self,
        app: AppT,
        name: str,
        *,
        source: TopicT,
        windows: Windows,
        initial: Callable[[], A],
        fold: Callable[[A, V], A],
        partitions: int,
        output: TopicT | Callable[[WindowResult[A]], Any] | None = None,
        to_value: Callable[[WindowResult[A]], Any] = _default_to_value,
        time_ms: Callable[[V], int] | None = None,
        dead_letter_topic: str | None = None,
    ) -> None:
        self.app = app
        self.name = name
        self.windows = windows
        self.source = source
        self.output = output
        self.to_value = to_value
        self.time_of = time_ms
        self.dead_letter_topic = dead_letter_topic
        self.partitions = partitions
        self.raw_source = app.topic(source.get_topic_name(), partitions=partitions, **_io.RAW)
        # Keys and values as JSON (Faust's choice for a str key type and no value type): the
        # accumulator must be JSON-friendly.
        self.table = app.Table(f"{name}-windows", partitions=partitions, key_type=str)
        self.processor: AggregateProcessor[A] = AggregateProcessor(
            windows, self.table, initial=initial, fold=fold
        )
        app.on_partitions_revoked.connect(self._forget)
        app.on_partitions_assigned.connect(self._forget)
        self.agent = app.agent(self.raw_source, name=f"{name}-aggregate")(self._run)

    # -- reading (this worker's partitions) --

    def changelog_topic(self) -> str:
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
        async for event in stream.events():
            await self.on_message(event.message)

    async def on_message(self, message: Any) -> None:
        if message.key is None:
            raise ValueError(
                f"aggregate {self.name}: {message.topic}[{message.partition}]@{message.offset} "
                "has no key; a windowed aggregate needs keyed records"
            )
        value = _io.loads_value(self.app, self.source, message.value)
        if self.time_of is not None:
            time_ms = int(self.time_of(value))
        else:
            time_ms = _io.event_time_ms(message)
        key = _io.b64(message.key)
        assert key is not None
        arrival = self.processor.process(message.partition, key, message.offset, time_ms, value)
        if arrival.outcome is Outcome.LATE:
            if self.dead_letter_topic is not None:
                await _io.dead_letter_late(
                    self.app, message, self.dead_letter_topic, ("aggregate", self.name), time_ms
                )
            self.processor.count_late(message.partition, message.offset)
        expiry = self.processor.plan_expiry(message.partition)
        if not expiry.empty:
            for closed in expiry.closed:
                await self._emit(message, closed)
            await _io.flush_before_forgetting(self.app)
            expiry.apply()

    async def _emit(self, source: Any, closed: ClosedWindow[A]) -> None:
        if self.output is None:
            return
        key = _io.loads_key(self.app, self.source, _io.unb64(closed.key))
        result = WindowResult(key, closed.start_ms, closed.end_ms, closed.value, source.partition)
        if callable(self.output) and not isinstance(self.output, TopicT):
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
            _io.dumps_value(self.app, out, self.to_value(result)),
        )


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
    to_value: Callable[[WindowResult[Any]], Any] = _default_to_value,
    time_ms: Callable[[Any], int] | None = None,
    dead_letter_topic: str | None = None,
) -> WindowedAggregate[Any, Any]:
    """Declare a windowed aggregate on ``app`` (see the module and docs/windows.md).

    ``source`` is a topic keyed by the aggregate's key, with its own codecs; ``partitions`` is
    its partition count, which the aggregate's table takes too. Per key and window the value is
    ``fold(...fold(initial(), v1)..., vn)`` over the window's records in offset order; it must
    be JSON-friendly (it is stored in a JSON table). Event time is ``time_ms(value)``, or the
    record's Kafka timestamp when not given.
    """
    return WindowedAggregate(
        app,
        name,
        source=source,
        windows=windows,
        initial=initial,
        fold=fold,
        partitions=partitions,
        output=output,
        to_value=to_value,
        time_ms=time_ms,
        dead_letter_topic=dead_letter_topic,
    )


def _zero() -> int:
    return 0


def _plus_one(count: int, _value: Any) -> int:
    return count + 1


def windowed_count(
    app: AppT,
    name: str,
    *,
    source: TopicT,
    windows: Windows,
    partitions: int,
    output: TopicT | Callable[[WindowResult[Any]], Any] | None = None,
    to_value: Callable[[WindowResult[Any]], Any] = _default_to_value,
    time_ms: Callable[[Any], int] | None = None,
    dead_letter_topic: str | None = None,
) -> WindowedAggregate[Any, int]:
    """`windowed_aggregate` counting the records per key and window."""
    return WindowedAggregate(
        app,
        name,
        source=source,
        windows=windows,
        initial=_zero,
        fold=_plus_one,
        partitions=partitions,
        output=output,
        to_value=to_value,
        time_ms=time_ms,
        dead_letter_topic=dead_letter_topic,
    )
