"""aiokafka's log of streamapp's Kafka clients: a broker outage in two lines, not twenty a second.

While a broker cannot be reached, aiokafka logs each failed attempt, several a second per client,
at ERROR or WARNING: ``Unable connect to node with id 2``, ``Failed fetch messages from 2:
NodeNotReadyError``, ``Group Coordinator Request failed``, ``Error sending HeartbeatRequest to
node 2 ... marking coordinator dead`` (`OUTAGE_MESSAGES`). A worker logged 650 to 1,315 such
lines in a 20 s outage of one broker. For a streamapp client (`ClientLog`, one per consumer or
producer) those records become:

- one WARNING as the first one comes, naming the client, the broker and aiokafka's message;
- one WARNING once none came for `QUIET_S`, with the count of failed attempts (aiokafka's
  records, each dropped meanwhile), how long they went on and the brokers they named; or as
  the client stops, if that comes first.

A record of those messages that carries another error than one of `UNREACHABLE` (a partition
whose leader moved: ``Failed fetch offsets from 1: NotLeaderForPartitionError``) is no outage's.
Any other record of aiokafka's is left as it is, and so is every record of a client that is not
streamapp's: a plain ``AIOKafkaConsumer`` or ``AIOKafkaProducer`` in the same process logs as
aiokafka does. A record is a streamapp client's when aiokafka makes it in that client's work:
`ClientLog.scope` marks the client's start (the tasks aiokafka creates there, its fetcher,
coordinator, heartbeats, sender and metadata refreshes, inherit the mark, as asyncio tasks
inherit the context they were created in) and its calls that talk to brokers themselves (a
commit, a send). aiokafka's loggers get one filter each (`_ClientRecords`, added once per
process), which looks at that mark and at nothing else: a record made with no mark passes it
untouched. Records a client reports in a line of its own (the group's join answers,
`streamapp.runtime.group.join_answers`) are dropped from that client's log the same way.

A broker a client no longer needs (its partitions' leaders moved) is no longer tried, so the
end line says the failures stopped, not that the broker is back. A broker that cannot be
reached at all (a host that drops packets) fails each attempt only after the client's request
timeout: with attempts further apart than `QUIET_S`, each is a start and an end of its own.
Tests: tests/unit/streamapp/runtime/test_client_log.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar

from aiokafka import errors as kafka_errors

logger = logging.getLogger(__name__)

#: How long without a failed attempt ends an outage.
QUIET_S = 10.0

#: The messages aiokafka repeats while a broker cannot be reached, by logger: the start of each
#: (its unformatted text), and which of its arguments names the broker (None: none does; a
#: pair: host and port).
OUTAGE_MESSAGES: Mapping[str, Mapping[str, int | tuple[int, int] | None]] = {
    # aiokafka's client logs as "aiokafka" (its client.py), the others by their module.
    "aiokafka": {
        'Unable connect to "%s:%s"': (0, 1),
        "Unable connect to node with id %s": 0,
        'Unable to request metadata from "%s:%s"': (0, 1),
        "Unable to request metadata from node with id %s": 0,
        "Unable to update metadata from %s": None,
    },
    "aiokafka.consumer.fetcher": {
        "Failed fetch messages from %s": 0,
        "Failed fetch offsets from %s": 0,
    },
    "aiokafka.consumer.group_coordinator": {
        "Group Coordinator Request failed": None,
        "Error sending %s to node %s": 1,
        "Marking the coordinator dead (node %s)": 0,
        "Heartbeat send request failed": None,
        "Heartbeat session expired": None,
        "Heartbeat failed for group %s: coordinator (node %s)": 1,
    },
    "aiokafka.producer.sender": {
        "FindCoordinator Request failed": None,
        "Cannot send %r to %s": 1,
        "Could not send %r": None,
    },
}

#: The errors that say a broker could not be reached (or did not answer in time). A record of
#: `OUTAGE_MESSAGES` that carries another error (a partition's leader moved, say) is no outage's
#: and is left as it is.
UNREACHABLE: tuple[type[BaseException], ...] = (
    OSError,  # ConnectionRefusedError and the other socket errors
    TimeoutError,  # asyncio's too
    kafka_errors.NodeNotReadyError,
    kafka_errors.KafkaConnectionError,
    kafka_errors.RequestTimedOutError,
    kafka_errors.KafkaTimeoutError,
    kafka_errors.GroupCoordinatorNotAvailableError,
    kafka_errors.NotCoordinatorForGroupError,
)

#: The streamapp client whose work the running task does; None: no streamapp client's.
_current: ContextVar[ClientLog | None] = ContextVar("streamapp_kafka_client", default=None)


class _ClientRecords(logging.Filter):
    """On an aiokafka logger: a record made in a streamapp client's work is that client's to
    keep or drop; any other passes untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        client = _current.get()
        return True if client is None else client.keep(record)


_FILTER = _ClientRecords()


def _attach(names: Iterator[str]) -> None:
    """The filter on each of these loggers (once: a logger's filters are a list)."""
    for name in names:
        aiokafka_logger = logging.getLogger(name)
        if _FILTER not in aiokafka_logger.filters:
            aiokafka_logger.addFilter(_FILTER)


def _broker(record: logging.LogRecord, where: int | tuple[int, int] | None) -> str | None:
    args = record.args if isinstance(record.args, tuple) else ()
    if isinstance(where, int) and where < len(args):
        return f"node {args[where]}"
    if isinstance(where, tuple) and max(where) < len(args):
        return f"{args[where[0]]}:{args[where[1]]}"
    return None


def _unreachable(record: logging.LogRecord) -> bool:
    """Whether the errors ``record`` carries, if any, say a broker could not be reached."""
    args = record.args if isinstance(record.args, tuple) else ()
    errors = [
        arg if isinstance(arg, type) else type(arg)
        for arg in args
        if isinstance(arg, BaseException)
        or (isinstance(arg, type) and issubclass(arg, BaseException))
    ]
    return all(issubclass(error, UNREACHABLE) for error in errors)


class ClientLog:
    """The log of one streamapp client (``kind`` ``"consumer"`` or ``"producer"``, and its
    client id): an outage's records aggregated, ``reported_elsewhere`` (logger -> message
    starts) dropped. Used from the client's event loop only."""

    def __init__(
        self,
        kind: str,
        client_id: str,
        *,
        reported_elsewhere: Mapping[str, tuple[str, ...]] | None = None,
        quiet_s: float = QUIET_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = f"{kind} {client_id}"
        self.reported_elsewhere = dict(reported_elsewhere or {})
        self.quiet_s = quiet_s
        self.clock = clock
        #: The open outage: when its first and last failed attempts came, how many there were,
        #: and per broker named, how many named it (None while there is none).
        self.first: float | None = None
        self.last = 0.0
        self.failures = 0
        self.brokers: dict[str, int] = {}
        self._timer: asyncio.TimerHandle | None = None
        _attach(iter({*OUTAGE_MESSAGES, *self.reported_elsewhere}))

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """aiokafka's records made in here, and in the tasks started in here, are this
        client's."""
        token = _current.set(self)
        try:
            yield
        finally:
            _current.reset(token)

    def keep(self, record: logging.LogRecord) -> bool:
        """Whether this client's ``record`` goes on to the handlers."""
        message = record.msg if isinstance(record.msg, str) else ""
        if message.startswith(self.reported_elsewhere.get(record.name, ())):
            return False
        outage = OUTAGE_MESSAGES.get(record.name, {})
        for start, where in outage.items():
            if message.startswith(start) and _unreachable(record):
                self.failed(record, _broker(record, where))
                return False
        return True

    def failed(self, record: logging.LogRecord, broker: str | None) -> None:
        """One failed attempt, ``record`` aiokafka's line for it."""
        now = self.clock()
        if self.first is None:
            self.first = now
            logger.warning(
                "streamapp: %s cannot reach %s: %s (aiokafka's lines for each further failed "
                "attempt are counted, not logged, until they stop for %.0f s)",
                self.name,
                broker or "a broker",
                record.getMessage(),
                self.quiet_s,
            )
            self._schedule(self.quiet_s)
        self.last = now
        self.failures += 1
        if broker is not None:
            self.brokers[broker] = self.brokers.get(broker, 0) + 1

    def _schedule(self, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to wait on: the next record or the stop ends it
            return
        self._timer = loop.call_later(delay, self.check)

    def check(self) -> None:
        """End the outage if no failed attempt came for `QUIET_S`, else look again then."""
        self._timer = None
        if self.first is None:
            return
        quiet_for = self.clock() - self.last
        if quiet_for >= self.quiet_s:
            self._end(f"none for {self.quiet_s:.0f} s")
        else:
            self._schedule(self.quiet_s - quiet_for)

    def close(self) -> None:
        """The client stops: an open outage ends with it."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.first is not None:
            self._end("the client stopped")

    def _end(self, why: str) -> None:
        assert self.first is not None
        brokers = ", ".join(f"{broker} ({n})" for broker, n in self.brokers.items())
        logger.warning(
            "streamapp: %s: the failures to reach %s ended (%s): %d failed attempt(s) over %.1f s",
            self.name,
            brokers or "the brokers",
            why,
            self.failures,
            self.last - self.first,
        )
        self.first, self.failures, self.brokers = None, 0, {}
