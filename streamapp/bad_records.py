"""Records that cannot be decoded, or whose processing raises: skipped, dead-lettered, or failed.

Kafka Streams' ``deserialization.exception.handler`` and ``processing.exception.handler``
(KIP-1033) are the model. One setting, ``bad_record_policy`` (`streamapp.App` keyword,
``STREAMAPP_BAD_RECORD_POLICY``, ``streamapp worker --bad-record-policy``), covers both kinds:

- ``skip`` (the default): one WARNING line naming topic, partition, offset and the error; the
  record is acked like a processed one, so its offset is committed and the group moves on.
- ``dead-letter``: the record's original key, value and headers go to the dead-letter topic
  (``<app id>-dead-letters`` unless ``dead_letter_topic`` names another), with headers naming
  the error and where the record came from (`dead_letter_headers`); then it is acked as above.
  The dead letter is delivered before the record is acked, so no commit covers a record whose
  dead letter could still be lost; under exactly_once it is produced in the transaction of the
  record's own partition, which commits its offset.
- ``fail``: Faust's own behaviour: the agent raises, Faust logs the crash and its supervisor
  restarts the agent after a pause (seconds), and the restarted agent goes on after the record.

The two kinds of bad record:

1. Decode errors. Faust's conductor decodes each record for the topics subscribed to it and,
   on a ``KeyDecodeError`` or ``ValueDecodeError``, acks the record and throws the error into
   the agent's stream, which crashes the agent. `Topic` handles the error inside the decode, before
   that ack, and (unless the policy is ``fail``) throws nothing.
2. Exceptions an agent raises while it processes one record. `Agent` wraps the agent's function:
   when it raises while its stream holds a current record, the policy decides; unless it is
   ``fail``, the function is called again on the same stream, which goes on after the record,
   as Faust's own restart of a crashed agent does, without the crash, the pause, or the restart
   budget Faust's supervisor counts. Exceptions that are about the cluster, the app or the
   process rather than the record (`is_record_error`), those raised where no single record is
   being processed (before the first one, or over a batch of ``stream.take()``, whose stream
   acks by hand), and those of streams with manual acks go Faust's way. Effects the failed record
   had before it raised (table writes, records sent) stay, as with KIP-1033's ``CONTINUE``;
   under exactly_once they commit with the record's offset. An agent over batches
   (`streamapp.batches`) catches a record's error itself and hands the record to
   `handle_record_error`, which applies the same policy.

The functions and classes before `BadRecords` are pure and tested on their own; the rest meets
Faust. Faust names relied on (faust-streaming 0.15.3), each where it is used:
``faust.Topic.__init__`` setting the instance attribute ``decode``, the conductor calling
``decode(message, propagate=True)``, ``Agent.fun`` (called on each actor start), ``Stream``'s
``current_event`` and ``get_active_stream``, ``Message.incref``/``ack``, and
``Topic.send_soon`` and ``publish_message`` (see `Topic`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import wraps
from typing import Any, cast

import faust
from aiokafka.errors import KafkaError
from faust.exceptions import (
    ImproperlyConfigured,
    KeyDecodeError,
    ProducerSendError,
    ValueDecodeError,
)
from faust.types import AppT, EventT, FutureMessage, Message, RecordMetadata, StreamT, TopicT
from faust.types.agents import AgentFun

from streamapp.changelog_records import (
    UndecodableChangelogRecord,
    changelog_table,
    counted_already,
    skips_undecodable,
)
from streamapp.sending import direct_send, sends

logger = logging.getLogger(__name__)

__all__ = [
    "Agent",
    "BadRecord",
    "BadRecordCounts",
    "BadRecordPolicy",
    "BadRecords",
    "DeadLetterError",
    "Stage",
    "Topic",
    "dead_letter_headers",
    "default_dead_letter_topic",
    "error_text",
    "guard_agent_fun",
    "handle_record_error",
    "is_record_error",
]


class BadRecordPolicy(StrEnum):
    """What a record that cannot be decoded, or whose processing raises, does.

    ``skip``: one WARNING line, the record acked and its offset committed. ``dead-letter``: its
    original key, value and headers go to the dead-letter topic first, then as ``skip``.
    ``fail``: stock Faust's way, the agent crashes and Faust restarts it after a pause.
    """

    SKIP = "skip"
    DEAD_LETTER = "dead-letter"
    FAIL = "fail"


class Stage(StrEnum):
    """Where a record went bad."""

    KEY_DECODE = "key-decode"
    VALUE_DECODE = "value-decode"
    PROCESSING = "processing"


#: Prefix of the headers a dead letter carries, after KIP-1034's ``__streams.errors.*``.
HEADER_PREFIX = "__streamapp.errors."
#: How much of an error's text a log line keeps: enough to tell errors apart, one screen line.
LOG_ERROR_CHARS = 300
#: How much of an error's text the ``message`` header keeps (Faust's decode errors quote input).
HEADER_ERROR_BYTES = 1000


def default_dead_letter_topic(app_id: str) -> str:
    return f"{app_id}-dead-letters"


def error_text(error: BaseException, limit: int = LOG_ERROR_CHARS) -> str:
    """``Type: message`` on one line, at most ``limit`` characters (a log line stays a line)."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_record_error(error: BaseException) -> bool:
    """Whether an exception an agent raised is about its record, so the policy applies.

    Not: errors of Kafka (aiokafka's, a fenced producer among them: the worker lost its
    partitions, and the record is someone else's now), of Faust's producer, of the app's
    configuration, or the process out of memory. Those would recur for every record, and
    skipping would drop them all; they go Faust's way (the agent crashes and restarts).
    """
    return isinstance(error, Exception) and not isinstance(
        error, KafkaError | ProducerSendError | ImproperlyConfigured | MemoryError
    )


@dataclass(frozen=True)
class BadRecord:
    """One bad record: where it is and what went wrong."""

    topic: str
    partition: int
    offset: int
    stage: Stage
    error: BaseException
    agent: str | None = None  # the agent that raised (processing errors)

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    @property
    def cause(self) -> str:
        if self.stage is Stage.KEY_DECODE:
            return f"key cannot be decoded: {error_text(self.error)}"
        if self.stage is Stage.VALUE_DECODE:
            return f"value cannot be decoded: {error_text(self.error)}"
        return f"agent {self.agent} raised {error_text(self.error)}"

    def skipped_line(self) -> str:
        return f"streamapp: skipped record {self.where}: {self.cause} (bad_record_policy=skip)"

    def changelog_skipped_line(self, table: str) -> str:
        return (
            f"streamapp: changelog record of table {table} partition {self.partition} at "
            f"offset {self.offset} ({self.where}) cannot be used: {self.cause}; recovery "
            "skipped it (not stored in the table), whatever bad_record_policy says"
        )

    def dead_lettered_line(self, topic: str) -> str:
        return f"streamapp: record {self.where} sent to dead-letter topic {topic}: {self.cause}"

    def failing_line(self) -> str:
        return (
            f"streamapp: record {self.where}: {self.cause} "
            "(bad_record_policy=fail: the agent raises; Faust restarts it)"
        )


def dead_letter_headers(
    record: BadRecord, original: Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None = None
) -> list[tuple[str, bytes]]:
    """The original record's headers, then ``__streamapp.errors.*`` naming error and source."""
    kept = list(original.items()) if isinstance(original, Mapping) else list(original or ())
    error = record.error
    kind = type(error)
    message = " ".join(str(error).split()).encode("utf-8", "replace")[:HEADER_ERROR_BYTES]
    ours = [
        ("stage", record.stage.value.encode()),
        ("exception", f"{kind.__module__}.{kind.__qualname__}".encode()),
        ("message", message),
        ("topic", record.topic.encode()),
        ("partition", str(record.partition).encode()),
        ("offset", str(record.offset).encode()),
    ]
    if record.agent is not None:
        ours.append(("agent", record.agent.encode()))
    return [*kept, *((HEADER_PREFIX + name, value) for name, value in ours)]


class BadRecordCounts:
    """Per source topic, how many records this worker skipped and dead-lettered since it started."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[str, int]] = {}
        #: (what happened, topic, stage) -> records: the same counts by stage, for /metrics.
        self.by_stage: dict[tuple[str, str, str], int] = {}

    def _topic(self, topic: str) -> dict[str, int]:
        return self._counts.setdefault(topic, {"skipped": 0, "dead_lettered": 0})

    def _count(self, what: str, topic: str, stage: Stage | None) -> None:
        self._topic(topic)[what] += 1
        key = (what, topic, stage.value if stage is not None else "unknown")
        self.by_stage[key] = self.by_stage.get(key, 0) + 1

    def skipped(self, topic: str, stage: Stage | None = None) -> None:
        self._count("skipped", topic, stage)

    def dead_lettered(self, topic: str, stage: Stage | None = None) -> None:
        self._count("dead_lettered", topic, stage)

    def as_json(self) -> dict[str, dict[str, int]]:
        return {topic: dict(counts) for topic, counts in sorted(self._counts.items())}


def guard_agent_fun(
    fun: AgentFun[Any], on_error: Callable[[StreamT[Any], Exception], Awaitable[bool]]
) -> AgentFun[Any]:
    """``fun``, called again on its stream when it raises and ``on_error`` says to go on.

    Faust's agent function takes the stream and returns a coroutine, or an async iterable when
    it yields (for sinks and replies); the guard keeps that shape. ``on_error(stream, error)``
    is asked about each exception and returns whether it was handled; if not, it propagates.
    """
    # Agent.clone hands its guarded function to the new Agent, which guards it for itself.
    fun = getattr(fun, "__streamapp_unguarded__", fun)

    @wraps(fun)
    def guarded(stream: StreamT[Any]) -> Any:
        first = fun(stream)
        if isinstance(first, AsyncIterable):
            return _guarded_iterable(fun, stream, first, on_error)
        return _guarded_awaitable(fun, stream, first, on_error)

    guarded.__streamapp_unguarded__ = fun  # type: ignore[attr-defined]
    return guarded


async def _guarded_awaitable(
    fun: AgentFun[Any],
    stream: StreamT[Any],
    first: Awaitable[Any],
    on_error: Callable[[StreamT[Any], Exception], Awaitable[bool]],
) -> Any:
    result = first
    while True:
        try:
            return await result
        except Exception as exc:
            if not await on_error(stream, exc):
                raise
        result = cast(Awaitable[Any], fun(stream))


async def _guarded_iterable(
    fun: AgentFun[Any],
    stream: StreamT[Any],
    first: AsyncIterable[Any],
    on_error: Callable[[StreamT[Any], Exception], Awaitable[bool]],
) -> AsyncIterator[Any]:
    result = first
    while True:
        try:
            async for value in result:
                yield value
            return
        except Exception as exc:
            if not await on_error(stream, exc):
                raise
        result = cast(AsyncIterable[Any], fun(stream))


# -- where it meets Faust --


class DeadLetterError(RuntimeError):
    """A bad record could not be sent to the dead-letter topic, so it must not be skipped."""


class BadRecords:
    """One app's bad-record handling: the policy in force, the counts, the dead-letter topic.

    The policy is read from ``app.streamapp_settings`` each time: ``streamapp worker`` replaces
    those settings after the app module (and this object) was created.
    """

    def __init__(self, app: AppT) -> None:
        self.app = app
        self.counts = BadRecordCounts()
        self._dead_letter_topic: TopicT | None = None

    @property
    def policy(self) -> BadRecordPolicy:
        settings = getattr(self.app, "streamapp_settings", None)
        return BadRecordPolicy(settings.bad_record_policy) if settings else BadRecordPolicy.FAIL

    @property
    def dead_letter_topic_name(self) -> str:
        settings = getattr(self.app, "streamapp_settings", None)
        named = settings.dead_letter_topic if settings else None
        return named or default_dead_letter_topic(self.app.conf.id)

    async def on_bad_record(self, record: BadRecord, message: Message) -> bool:
        """Apply the policy to ``record`` (``message`` holds its bytes); False under ``fail``.

        Raises `DeadLetterError` when the dead letter cannot be delivered.
        """
        policy = self.policy
        if policy is BadRecordPolicy.FAIL:
            logger.error("%s", record.failing_line())
            return False
        if policy is BadRecordPolicy.DEAD_LETTER:
            topic = await self._send_dead_letter(record, message)
            self.counts.dead_lettered(record.topic, record.stage)
            logger.warning("%s", record.dead_lettered_line(topic))
        else:
            self.counts.skipped(record.topic, record.stage)
            logger.warning("%s", record.skipped_line())
        return True

    async def _send_dead_letter(self, record: BadRecord, message: Message) -> str:
        name = self.dead_letter_topic_name
        app = self.app
        try:
            if self._dead_letter_topic is None:
                # Usually created by `streamapp worker` at start (it refuses to start when the
                # broker will not); this covers an app run another way. Faust creates a topic
                # with the app's topic_replication_factor when it declares no replicas.
                topic = app.topic(
                    name,
                    partitions=1,
                    key_type=bytes,
                    value_type=bytes,
                    key_serializer="raw",
                    value_serializer="raw",
                )
                await topic.maybe_declare()
                self._dead_letter_topic = topic
            headers = dead_letter_headers(record, message.headers)
            # Under exactly_once in the transaction of the record's own partition, the one that
            # commits its offset.
            pending = await sends.send_for_source(
                app, message.tp, name, message.key, message.value, headers=headers
            )
            # Delivered before the record is acked: a commit never covers a record whose dead
            # letter could still fail (Faust's commit flushes the producer, but ignores errors).
            await pending
        except (KafkaError, ProducerSendError, OSError, TimeoutError) as exc:
            logger.error(
                "streamapp: record %s could not be sent to dead-letter topic %s: %s; "
                "it is not skipped",
                record.where,
                name,
                error_text(exc),
            )
            raise DeadLetterError(f"dead-letter topic {name}: {error_text(exc)}") from exc
        return name


def bad_records_of(app: AppT) -> BadRecords | None:
    """The app's `BadRecords`; None for an app that is not a `streamapp.App` (Faust's way)."""
    handler = getattr(app, "streamapp_bad_records", None)
    return handler if isinstance(handler, BadRecords) else None


async def handle_record_error(
    app: AppT, message: Message, error: Exception, agent: str | None = None
) -> bool:
    """Apply the app's policy to a record whose processing raised ``error``, for an agent that
    catches its records' errors itself: a batch agent (`streamapp.batches`), where the policy
    does not apply on its own because one record cannot be blamed for a raising batch.

    The record is skipped or dead-lettered (delivered before this returns, under exactly_once
    in the transaction of the record's partition) and counted as `Agent` would.

    Args:
        app: The agent's app.
        message: The record's message (``event.message``).
        error: What its processing raised.
        agent: The agent's name, for the log line and the dead letter's headers.

    Returns:
        True when the record was skipped or dead-lettered; False under ``fail``, or for an
        app that is not a `streamapp.App`: the caller raises.

    Raises:
        DeadLetterError: The dead letter could not be delivered.
    """
    handler = bad_records_of(app)
    if handler is None:
        return False
    record = BadRecord(
        message.topic, message.partition, message.offset, Stage.PROCESSING, error, agent
    )
    return await handler.on_bad_record(record, message)


class Topic(direct_send.Topic):
    """Faust's topic; a record whose key or value does not decode meets the bad-record policy,
    and under exactly_once a message ``send_soon`` buffers while an agent processes a record is
    published in that record's transaction, as ``send`` is (`streamapp.sending.sends`).
    What is sent is encoded with codecs looked up once (`streamapp.codecs.topic_codecs`),
    and ``send`` hands it to the producer in one coroutine (`streamapp.sending.direct_send`).

    `streamapp.App` makes it the app's ``Topic`` class (a Faust setting).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # faust.Topic.__init__ compiles the decoder into the instance attribute ``decode``
        # (Topic._compile_decode), which shadows any method a subclass could define. Faust's
        # conductor calls it as ``decode(message, propagate=True)`` and, when it raises a
        # DecodeError, acks the record and calls on_{key,value}_decode_error: wrapping the
        # decoder is the one place to act before that ack, as a dead letter must.
        self.decode = self._guarded_decode(self.decode)  # type: ignore[method-assign,assignment]

    def _guarded_decode(
        self, decode: Callable[..., Awaitable[EventT[Any]]]
    ) -> Callable[..., Awaitable[EventT[Any] | None]]:
        async def guarded(message: Message, *, propagate: bool = False) -> EventT[Any] | None:
            try:
                return await decode(message, propagate=True)
            except (KeyDecodeError, ValueDecodeError) as exc:
                is_key = isinstance(exc, KeyDecodeError)
                handler = bad_records_of(self.app)
                record = BadRecord(
                    message.topic,
                    message.partition,
                    message.offset,
                    Stage.KEY_DECODE if is_key else Stage.VALUE_DECODE,
                    exc,
                )
                table = changelog_table(self.app, message.topic)
                if table is not None and skips_undecodable(table):
                    # Recovery counts it and the store does not take it, whatever the policy
                    # (streamapp.changelog_records).
                    if not counted_already(self.app, message.tp, message.offset):
                        if handler is not None:
                            handler.counts.skipped(record.topic, record.stage)
                        logger.warning("%s", record.changelog_skipped_line(table.name))
                    return UndecodableChangelogRecord(
                        self.app, None, None, message.headers, message
                    )
                if handler is not None:
                    await handler.on_bad_record(record, message)
                if propagate:
                    raise
                # Faust's decoder calls the hook itself when asked not to propagate.
                hook = self.on_key_decode_error if is_key else self.on_value_decode_error
                await hook(exc, message)
                return None

        return guarded

    def send_soon(self, *args: Any, **kwargs: Any) -> FutureMessage:
        fut = super().send_soon(*args, **kwargs)
        if self.app.in_transaction:
            sends.note_source(fut)
        return fut

    async def publish_message(
        self, fut: FutureMessage, wait: bool = False
    ) -> Awaitable[RecordMetadata]:
        with sends.publishing_for(fut):
            return await super().publish_message(fut, wait=wait)

    async def on_key_decode_error(self, exc: Exception, message: Message) -> None:
        # Faust's throws the error into the agent's stream; unless the policy is fail, the
        # record was handled in the decoder, and the agent goes on with the next.
        if _policy(self.app) is BadRecordPolicy.FAIL:
            await super().on_key_decode_error(exc, message)

    async def on_value_decode_error(self, exc: Exception, message: Message) -> None:
        if _policy(self.app) is BadRecordPolicy.FAIL:
            await super().on_value_decode_error(exc, message)


# Its publish_message differs from Faust's only for a message send_soon buffered (`sends`), which
# ``send`` never makes: a send may skip it (`direct_send`).
direct_send.publishes_as_faust(Topic.publish_message)


def _policy(app: AppT) -> BadRecordPolicy:
    handler = bad_records_of(app)
    return handler.policy if handler is not None else BadRecordPolicy.FAIL


#: How long an agent waits for its stream to let go of a record that raised (see below).
RELEASE_TIMEOUT_S = 5.0


class Agent(faust.Agent):
    """Faust's agent; an exception raised over one record meets the bad-record policy.

    `streamapp.App` makes it the app's ``Agent`` class (a Faust setting).
    """

    def __init__(self, fun: AgentFun[Any], **kwargs: Any) -> None:
        super().__init__(fun, **kwargs)
        # Faust calls ``self.fun(stream)`` each time it starts an actor, its restarts included
        # (Agent.actor_from_stream), so the guard is there for every call.
        self.fun = guard_agent_fun(self.fun, self._on_agent_error)

    async def _on_agent_error(self, stream: StreamT[Any], error: Exception) -> bool:
        handler = bad_records_of(self.app)
        if handler is None or not is_record_error(error):
            return False
        # The stream an agent iterates may be one derived from its own (group_by, through).
        active = stream.get_active_stream()
        event = active.current_event
        if event is None or not active.enable_acks:
            return False  # no single record to blame, or acks are the agent's own (take, noack)
        message = event.message
        record = BadRecord(
            message.topic, message.partition, message.offset, Stage.PROCESSING, error, self.name
        )
        # Hold the record's ack until it is handled (a dead letter delivered): the stream acks it
        # when its abandoned iteration is closed, which may come first.
        message.incref()
        try:
            handled = await handler.on_bad_record(record, message)
        except DeadLetterError as exc:
            await self.app.crash(exc)  # never acked: the record is read again after the restart
            return False
        message.ack(self.app.consumer)
        if not handled:
            return False
        # The agent's ``async for`` left the stream's iteration suspended at this record; Python
        # closes it soon (asyncio's async-generator finalizer), and closing acks the record and
        # clears the stream's current event. Going on before that would let it clear, or ack,
        # the next record's instead. Faust's restart pause hides the same wait.
        if not await _released(active, event):
            logger.warning(
                "streamapp: the stream of agent %s still holds record %s after %.0f s; "
                "leaving the restart to Faust",
                self.name,
                record.where,
                RELEASE_TIMEOUT_S,
            )
            return False
        return True


async def _released(
    stream: StreamT[Any], event: EventT[Any], timeout_s: float = RELEASE_TIMEOUT_S
) -> bool:
    """Wait until ``stream`` no longer holds ``event`` as its current one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    rounds = 0
    while stream.current_event is event:
        if loop.time() > deadline:
            return False
        rounds += 1
        if rounds == 100:
            # Still referenced: a cycle (the exception's traceback holds frames) keeps the
            # iteration alive until the collector finds it.
            gc.collect()
        await asyncio.sleep(0 if rounds < 100 else 0.01)
    return True
