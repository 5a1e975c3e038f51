"""The inputs of joins and aggregates: how a source record is read, reported and, when it is bad,
handed to the app's ``bad_record_policy``.

Every join and aggregate names its inputs by role (``left``/``right``, ``stream``/``table``,
``source``), each a topic or a `Source`: the topic, with how to read a record's event time
(``time_ms``) and what it is about (``id``) from its decoded value. A record is read when it
arrives (`read_record`): its key and value decoded with its own topic's codecs, its event time
and id taken. A record that cannot be read raises `UndecodableRecord`, which names the record;
the join or aggregate then reports it to ``on_record`` (as ``UNDECODABLE``) and hands it to the
policy (`apply_bad_record_policy`) before anything is stored, so a bad record never changes
state and is never blamed on another.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from faust.types import AppT, TopicT

from streamapp.bad_records import (
    BadRecord,
    BadRecordPolicy,
    Stage,
    bad_records_of,
    error_text,
)
from streamapp.joins import _io
from streamapp.joins.outcome import Outcome
from streamapp.joins.window import Side

__all__ = [
    "OnRecord",
    "Read",
    "Source",
    "SourceRecord",
    "UndecodableRecord",
    "apply_bad_record_policy",
    "as_source",
    "read_record",
    "report",
]


@dataclass(frozen=True)
class Source:
    """One input of a join or an aggregate: a topic and how to read its records.

    ``topic``: the topic, declared with its own key and value codecs (``app.topic(...)``).
    ``time_ms(value)``: a record's event time in milliseconds, from its decoded value; when not
    given, the record's Kafka timestamp. ``id(value)``: what the record is about, from its
    decoded value: a second record with the id of one still held is a duplicate (see each join
    and aggregate for what "held" means there); when not given, no record is a duplicate.

    A deletion (a record with a ``None`` value, on a table topic) has no value to read: its event
    time is its Kafka timestamp, and it has no id.
    """

    topic: TopicT
    time_ms: Callable[[Any], int] | None = None
    id: Callable[[Any], Any] | None = None

    @property
    def name(self) -> str:
        """The topic's name."""
        return self.topic.get_topic_name()


def as_source(source: TopicT | Source) -> Source:
    """``source`` as a `Source`: a bare topic reads event time from the Kafka timestamp and has
    no ids. Raises TypeError for anything else."""
    if isinstance(source, Source):
        return source
    if isinstance(source, TopicT):
        return Source(source)
    raise TypeError(f"a source is a topic (app.topic(...)) or a Source, not {source!r}")


@dataclass(frozen=True)
class Read:
    """A source record as read on arrival: decoded key and value, event time, id."""

    key: Any
    value: Any
    time_ms: int
    id: str | None


class UndecodableRecord(ValueError):
    """A source record that cannot be read; its message names the record and the reason.

    ``stage``: where it went bad (`streamapp.bad_records.Stage`: the key or the value did not
    decode, or processing: no key, or its event time or id could not be read); ``cause``: the
    underlying exception (the codec's, or what ``time_ms``/``id`` raised), or None.
    """

    def __init__(
        self, owner: str, message: Any, stage: Stage, what: str, cause: BaseException | None
    ) -> None:
        where = f"{message.topic}[{message.partition}]@{message.offset}"
        because = f": {error_text(cause)}" if cause is not None else ""
        super().__init__(f"{owner}: record {where}: {what}{because}")
        self.stage = stage
        self.cause = cause


def read_record(
    app: AppT, owner: str, source: Source, message: Any, *, deletions: bool = False
) -> Read:
    """Read ``message`` (a Faust message of ``source``'s topic, raw bytes) as ``source`` says.

    ``owner`` names the join or aggregate in errors (``"join orders-payments"``). With
    ``deletions`` a ``None`` value is a deletion (a table topic's); otherwise the value is
    decoded as it is (a ``None`` value reaches ``time_ms``/``id`` as None). Raises
    `UndecodableRecord` for a record with no key, a key or value its topic's codecs refuse, or
    whose ``time_ms`` or ``id`` raises.
    """
    topic = source.topic
    if message.key is None:
        raise UndecodableRecord(
            owner, message, Stage.PROCESSING, "no key (joins and aggregates need keys)", None
        )
    try:
        key = _io.loads_key(app, topic, message.key)
    except Exception as exc:
        raise UndecodableRecord(
            owner, message, Stage.KEY_DECODE, "key does not decode", exc
        ) from exc
    if message.value is None and deletions:
        return Read(key, None, _io.event_time_ms(message), None)
    try:
        value = _io.loads_value(app, topic, message.value)
    except Exception as exc:
        raise UndecodableRecord(
            owner, message, Stage.VALUE_DECODE, "value does not decode", exc
        ) from exc
    try:
        time_ms = (
            int(source.time_ms(value)) if source.time_ms is not None else _io.event_time_ms(message)
        )
    except Exception as exc:
        raise UndecodableRecord(
            owner, message, Stage.PROCESSING, "no event time (time_ms raised)", exc
        ) from exc
    record_id: str | None = None
    if source.id is not None:
        try:
            record_id = str(source.id(value))
        except Exception as exc:
            raise UndecodableRecord(
                owner, message, Stage.PROCESSING, "no id (id raised)", exc
            ) from exc
    return Read(key, value, time_ms, record_id)


async def apply_bad_record_policy(
    app: AppT, message: Any, error: UndecodableRecord, agent: str
) -> None:
    """Skip or dead-letter ``message`` as the app's ``bad_record_policy`` says, counted in
    ``streamapp_records_skipped_total`` or ``streamapp_dead_letters_total``; the dead letter is
    delivered before this returns (under exactly_once in the transaction of the record's
    partition).

    Raises ``error`` under ``fail`` (and for an app that is not a `streamapp.App`), so that the
    agent raises as Faust's does; raises `streamapp.bad_records.DeadLetterError` when the dead
    letter cannot be delivered.
    """
    handler = bad_records_of(app)
    if handler is None or handler.policy is BadRecordPolicy.FAIL:
        raise error
    # The codec's own error for a decode (the dead letter's headers name its class), ours for
    # the rest (it names the join or aggregate and the reason).
    cause = error.cause if error.stage is not Stage.PROCESSING and error.cause else error
    record = BadRecord(message.topic, message.partition, message.offset, error.stage, cause, agent)
    await handler.on_bad_record(record, message)


@dataclass(frozen=True)
class SourceRecord:
    """One source record as a join or an aggregate handled it: what ``on_record`` receives.

    ``source``: the input's role (``"left"``, ``"right"``, ``"stream"``, ``"table"`` or
    ``"source"``); ``key`` and ``value``: decoded (``value`` None for an undecodable record, and
    ``key`` then as it came if it did not decode); ``time_ms``: its event time (None when
    undecodable); ``partition``; ``outcome``: a `streamapp.joins.Outcome`; ``message``: the
    Faust message (pass it to the join's or aggregate's ``send`` to send on its behalf);
    ``error``: for ``UNDECODABLE``, the `UndecodableRecord` the app's ``bad_record_policy``
    gets once the hook returns.
    """

    source: str
    key: Any
    value: Any
    time_ms: int | None
    partition: int
    outcome: Outcome
    message: Any
    error: Exception | None = None

    @property
    def side(self) -> Side:
        """A windowed join's `streamapp.joins.Side` of the record (``source`` as a Side); raises
        ValueError for the inputs of other joins and aggregates."""
        return Side(self.source)


OnRecord = Callable[[SourceRecord], Any]


async def report(
    on_record: OnRecord | None,
    app: AppT,
    topic: TopicT,
    role: str,
    message: Any,
    outcome: Outcome,
    read: Read | None = None,
    error: Exception | None = None,
) -> None:
    """Call ``on_record`` (plain or async), if given, with the record and its outcome."""
    if on_record is None:
        return
    if read is not None:
        key, value, time_ms = read.key, read.value, read.time_ms
    else:
        try:
            key = _io.loads_key(app, topic, message.key)
        except Exception:
            key = message.key  # an undecodable record's key may not decode either: as it came
        value, time_ms = None, None
    record = SourceRecord(role, key, value, time_ms, message.partition, outcome, message, error)
    done = on_record(record)
    if inspect.isawaitable(done):
        await done
