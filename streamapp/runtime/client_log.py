"""aiokafka's log of a worker's Kafka clients: a broker outage in two lines, not twenty a second.

While a broker cannot be reached, aiokafka logs each failed attempt, several a second per client,
at ERROR or WARNING: ``Unable connect to node with id 2``, ``Failed fetch messages from 2:
NodeNotReadyError``, ``Group Coordinator Request failed``, ``Got error produce response``
(`OUTAGE_MESSAGES`). A worker has several clients (its consumer, its offsets reader, its
producer, under exactly_once a transactional producer per partition, the changelog watch's
admin client), and logged 650 to 1,315 such lines in a 20 s outage of one broker of three. For
streamapp's clients those records become the process's one `Outage`:

- one WARNING as the first one naming a broker comes (at once, in an outage: a failed
  connection names it), naming the broker and quoting aiokafka's message; another if a second
  broker refuses connections while the outage lasts;
- one WARNING once none came for `QUIET_S` and the brokers named accept connections again (or
  as the worker's last client stops), with the count of failed attempts (aiokafka's records,
  each dropped meanwhile) by client, how long the outage lasted and the brokers it named.

While failed attempts come (within `QUIET_S` of the last), what follows from them is counted
in the outage too, not logged: records of
those messages carrying an error that says a leader or the group's coordinator moved
(`MOVED`: ``NotLeaderForPartitionError``, ``LeaderNotAvailableError``, the coordinator loading
the group), and Faust's ``Timer commit is overlapping`` (a commit waited for the dead broker),
whose longest run the end line gives. Otherwise they are left as they are: a partition whose
leader moved is one line of aiokafka's, as it always was.

Any other record is left as it is, and so is every record of a client that is not streamapp's:
a plain ``AIOKafkaConsumer`` or ``AIOKafkaProducer`` in the same process logs as aiokafka does.
A record is a streamapp client's when aiokafka makes it in that client's work: `ClientLog.scope`
marks the client's start (the tasks aiokafka creates there, its fetcher, coordinator,
heartbeats, sender and metadata refreshes, inherit the mark, as asyncio tasks inherit the
context they were created in) and its calls that talk to brokers themselves (a commit, a send).
aiokafka's loggers get one filter each (`_ClientRecords`, added once per process), which looks
at that mark and at nothing else: a record made with no mark passes it untouched. Records a
client reports in a line of its own (the group's join answers,
`streamapp.runtime.group.join_answers`) are dropped from that client's log the same way.

A broker a client no longer needs (its partitions' leaders moved) is no longer tried, so the
quiet alone does not say the broker is back: the outage looks (`Outage.check`, a TCP connection
to the address aiokafka's errors gave) and ends once it accepts connections; a broker named by
no address ends with the quiet. A broker that cannot be reached at all (a host that drops
packets) fails each attempt only after the client's request timeout; its address refuses
nothing, but accepts nothing either, and the outage goes on.
Tests: tests/unit/streamapp/runtime/test_client_log.py; tests/integration/test_broker_failover.py.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Protocol

from aiokafka import errors as kafka_errors

logger = logging.getLogger(__name__)

#: How long without a failed attempt ends an outage (once its brokers accept connections).
QUIET_S = 10.0
#: How long the look at whether a broker accepts connections again waits for it.
PROBE_TIMEOUT_S = 1.0

#: The messages aiokafka repeats while a broker cannot be reached, by logger: the start of each
#: (its unformatted text), and which of its arguments names the broker (None: none does, but
#: its text may, as ``node id 2``; a pair: host and port).
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
        "Attempt to fetch offsets for partition %s failed due to": None,
    },
    "aiokafka.consumer.group_coordinator": {
        "Group Coordinator Request failed": None,
        "Error sending %s to node %s": 1,
        "Marking the coordinator dead (node %s)": 0,
        "Heartbeat send request failed": None,
        "Heartbeat session expired": None,
        "Heartbeat failed for group %s: coordinator (node %s)": 1,
        "OffsetCommit failed for group %s because group is initializing": None,
        "OffsetCommit failed for group %s due to a coordinator error": None,
    },
    "aiokafka.producer.sender": {
        "FindCoordinator Request failed": None,
        "Cannot send %r to %s": 1,
        "Could not send %r": None,
        "Got error produce response": None,
    },
}

#: The errors that say a broker could not be reached (or did not answer in time). A record of
#: `OUTAGE_MESSAGES` whose errors are all of these is a failed attempt.
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

#: Of those, the errors of a refused or broken connection: a broker that fails so is down (a
#: node merely not connected yet fails with ``NodeNotReadyError`` too).
REFUSED: tuple[type[BaseException], ...] = (OSError, kafka_errors.KafkaConnectionError)

#: The errors that say a partition's leader or the group's coordinator moved, or has too few
#: replicas in sync for a while: what follows a broker's failure. A record of `OUTAGE_MESSAGES`
#: whose errors are all of these is counted in an open outage, and left as it is otherwise.
MOVED: tuple[type[BaseException], ...] = (
    kafka_errors.NotLeaderForPartitionError,
    kafka_errors.LeaderNotAvailableError,
    kafka_errors.StaleMetadata,
    kafka_errors.GroupLoadInProgressError,
    kafka_errors.NotEnoughReplicasError,
    kafka_errors.NotEnoughReplicasAfterAppendError,
)

#: Faust's (mode's) timers, and the line one logs when a run took longer than its interval.
TIMERS_LOGGER = "mode.timers"
TIMER_OVERLAPPING = "Timer %s is overlapping"

#: A broker named in a message's text rather than an argument: ``node id 2``, ``node 2``.
_NODE_IN_TEXT = re.compile(r"\bnode (?:id )?(\d+)")
#: A broker's address in an error's text: ``Connect call failed ('127.0.0.1', 9092)``,
#: ``Connection at 127.0.0.1:9092 closed``.
_ADDRESS_IN_TEXT = re.compile(r"\('([^']+)', (\d+)\)|Connection at (\S+):(\d+) ")

#: The streamapp client whose work the running task does; None: no streamapp client's.
_current: ContextVar[ClientLog | None] = ContextVar("streamapp_kafka_client", default=None)


class Cancellable(Protocol):
    def cancel(self) -> None: ...


#: Runs a callback after a delay, on a thread of its own (``threading.Timer``, started).
Schedule = Callable[[float, Callable[[], None]], Cancellable]


def _thread_timer(delay: float, callback: Callable[[], None]) -> Cancellable:
    timer = threading.Timer(delay, callback)
    timer.daemon = True
    timer.start()
    return timer


def _errors(record: logging.LogRecord) -> list[type[BaseException]]:
    """The errors ``record`` carries: exceptions, exception classes, or an aiokafka error's
    class name (aiokafka's commit lines say the error by its name)."""
    args = record.args if isinstance(record.args, tuple) else ()
    found: list[type[BaseException]] = []
    for arg in args:
        if isinstance(arg, BaseException):
            found.append(type(arg))
        elif isinstance(arg, type) and issubclass(arg, BaseException):
            found.append(arg)
        elif isinstance(arg, str) and arg.endswith("Error"):
            named = getattr(kafka_errors, arg, None)
            if isinstance(named, type) and issubclass(named, BaseException):
                found.append(named)
    return found


def _broker(record: logging.LogRecord, where: int | tuple[int, int] | None) -> str | None:
    args = record.args if isinstance(record.args, tuple) else ()
    if isinstance(where, int) and where < len(args):
        return f"node {args[where]}"
    if isinstance(where, tuple) and max(where) < len(args):
        return f"{args[where[0]]}:{args[where[1]]}"
    named = _NODE_IN_TEXT.search(record.getMessage())
    return f"node {named[1]}" if named else None


def _address(record: logging.LogRecord) -> str | None:
    """The broker address the text of ``record`` names, if any."""
    found = _ADDRESS_IN_TEXT.search(record.getMessage())
    if found is None:
        return None
    host, port = (found[1], found[2]) if found[1] is not None else (found[3], found[4])
    return f"{host}:{port}"


def _accepts_connections(address: str) -> bool:
    """Whether ``host:port`` accepts a TCP connection (a broker that is up again)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S):
            return True
    except (OSError, ValueError):
        return False


class Outage:
    """The outage a worker's streamapp clients are in, if any: every client's failed attempts,
    said in one line as they start and one as they end. One per process (`PROCESS_OUTAGE`);
    its records may come from any thread.

    It ends once no failed attempt came for `QUIET_S` and every broker it named by address
    accepts connections again (`probe`, looked at every `QUIET_S` after that): clients stop
    trying a broker whose partitions' leaders and group coordinator moved away, so their quiet
    does not say it is back. With no address known, the quiet ends it. As the worker's last
    client stops, it ends with it.
    """

    def __init__(
        self,
        *,
        quiet_s: float = QUIET_S,
        clock: Callable[[], float] = time.monotonic,
        schedule: Schedule = _thread_timer,
        probe: Callable[[str], bool] = _accepts_connections,
    ) -> None:
        self.quiet_s = quiet_s
        self.clock = clock
        self.schedule = schedule
        self.probe = probe
        self._lock = threading.Lock()
        #: The streamapp clients not stopped yet: the last one to stop ends an open outage.
        self.clients: weakref.WeakSet[ClientLog] = weakref.WeakSet()
        self._timer: Cancellable | None = None
        #: Each node's address, as the errors' texts give it: a broker is named both ways (a
        #: bootstrap address, a node id), and counted as one.
        self.addresses: dict[str, str] = {}
        self._reset()

    def _reset(self) -> None:
        #: When the open outage's first and last failed attempts came (None: none is open).
        self.first: float | None = None
        self.last = 0.0
        #: The client id of the worker whose clients failed (the first one's).
        self.client_id = ""
        #: Failed attempts: in all, per broker (as records named it) and per client.
        self.failures = 0
        self.brokers: dict[str, int] = {}
        self.by_client: dict[str, int] = {}
        #: The brokers a WARNING named as they failed (as records named them).
        self.said: set[str] = set()
        #: Records of what followed (leaders and the coordinator moving) counted meanwhile.
        self.moved = 0
        #: Faust's timers that overran meanwhile: name -> their longest run, in seconds.
        self.overruns: dict[str, float] = {}

    @property
    def open(self) -> bool:
        return self.first is not None

    def failed(self, client: ClientLog, record: logging.LogRecord, broker: str | None) -> None:
        """One failed attempt of ``client``'s, ``record`` aiokafka's line for it."""
        errors = _errors(record)
        refused = bool(errors) and all(issubclass(error, REFUSED) for error in errors)
        address = _address(record)
        with self._lock:
            if broker is not None and broker.startswith("node ") and address is not None:
                self.addresses[broker] = address
            broker = broker or address
            now = self.clock()
            say = None
            if self.first is None:
                self.first = now
                self.client_id = client.client_id
                self._timer = self.schedule(self.quiet_s, self.check)
            if broker is not None and not self.said:
                say = ""  # the outage's first record that names a broker
            elif broker is not None and refused and not self._said(broker):
                say = " either"
            self.last = now
            self.failures += 1
            self.by_client[client.kind] = self.by_client.get(client.kind, 0) + 1
            if broker is not None:
                self.brokers[broker] = self.brokers.get(broker, 0) + 1
                if say is not None:
                    self.said.add(broker)
            named = self._shown(broker) if broker is not None else ""
        if say is not None:
            logger.warning(
                "streamapp: %s cannot reach Kafka broker %s%s: %s (its %s's; its Kafka clients "
                "retry, and their failed attempts are counted, not logged, until they end)",
                client.client_id,
                named,
                say,
                record.getMessage(),
                client.kind,
            )

    def _node(self, broker: str) -> str:
        """The node a record's name of a broker is (``node 2`` for its address, once known)."""
        for node, address in self.addresses.items():
            if broker == address:
                return node
        return broker

    def _shown(self, broker: str) -> str:
        """``node 2 (127.0.0.1:9092)`` once the node's address is known."""
        node = self._node(broker)
        address = self.addresses.get(node)
        return f"{node} ({address})" if address else node

    def _said(self, broker: str) -> bool:
        """Whether a WARNING named ``broker`` already (under either of its names)."""
        return any(self._node(said) == self._node(broker) for said in self.said)

    def absorbed(self, record: logging.LogRecord) -> bool:
        """Whether ``record``, of what follows an outage, is counted in the open one: while
        failed attempts still come (within `QUIET_S` of the last)."""
        with self._lock:
            if self.first is None or self.clock() - self.last >= self.quiet_s:
                return False
            if record.name == TIMERS_LOGGER:
                args = record.args if isinstance(record.args, tuple) else ()
                name, runtime = (str(args[0]), args[2]) if len(args) > 2 else ("?", 0.0)
                if isinstance(runtime, int | float):
                    self.overruns[name] = max(float(runtime), self.overruns.get(name, 0.0))
            else:
                self.moved += 1
            return True

    def check(self) -> None:
        """End the outage once no failed attempt came for `QUIET_S` and the brokers it named by
        address accept connections; else look again later."""
        with self._lock:
            self._timer = None
            if self.first is None:
                return
            quiet_for = self.clock() - self.last
            if quiet_for < self.quiet_s:
                self._timer = self.schedule(self.quiet_s - quiet_for, self.check)
                return
            last = self.last
            addresses = sorted(
                {self.addresses[n] for b in self.brokers if (n := self._node(b)) in self.addresses}
                | {b for b in self.brokers if not b.startswith("node ")}
            )
        # Outside the lock: a connection may take a while, and records keep coming.
        back = all(self.probe(address) for address in addresses)
        with self._lock:
            if self.first is None:  # ended meanwhile: the clients stopped
                return
            if not back or self.last != last:
                self._timer = self.schedule(self.quiet_s, self.check)
                return
            if not addresses:
                why = f"none for {self.quiet_s:.0f} s"
            else:
                why = f"{'it accepts' if len(addresses) == 1 else 'they accept'} connections again"
            line = self._close(why)
        logger.warning(*line)

    def started(self, client: ClientLog) -> None:
        with self._lock:
            self.clients.add(client)

    def stopped(self, client: ClientLog) -> None:
        """``client`` stops: the last of them ends an open outage."""
        with self._lock:
            self.clients.discard(client)
            if self.clients or self.first is None:
                return
            line = self._close("the worker's clients stopped")
        logger.warning(*line)

    def _close(self, why: str) -> tuple[object, ...]:
        """Close the open outage (the lock held), and return its end line's message and
        arguments."""
        assert self.first is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        counts: dict[str, int] = {}
        for broker, n in self.brokers.items():
            shown = self._shown(broker)
            counts[shown] = counts.get(shown, 0) + n
        if len(counts) > 1:
            brokers = "brokers " + ", ".join(f"{broker} ({n})" for broker, n in counts.items())
        else:
            brokers = "broker " + (next(iter(counts), None) or "(unnamed)")
        clients = ", ".join(f"{kind} {n}" for kind, n in self.by_client.items())
        also = []
        if self.moved:
            also.append(f"{self.moved} retried as leaders and the group's coordinator moved")
        for name, runtime in self.overruns.items():
            also.append(f"Faust's {name} timer ran up to {runtime:.1f} s")
        line = (
            "streamapp: %s: the failures to reach Kafka %s ended (%s): %d failed attempt(s) "
            "in %.1f s, by its %s%s",
            self.client_id,
            brokers,
            why,
            self.failures,
            self.clock() - self.first,
            clients,
            "; " + "; ".join(also) if also else "",
        )
        self._reset()
        return line


#: The process's outage: every streamapp client of the process counts its failures in it.
PROCESS_OUTAGE = Outage()


class _ClientRecords(logging.Filter):
    """On an aiokafka logger: a record made in a streamapp client's work is that client's to
    keep or drop; any other passes untouched. On Faust's timers' logger: a timer's overrun is
    counted in an open outage."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == TIMERS_LOGGER:
            message = record.msg if isinstance(record.msg, str) else ""
            return not (message.startswith(TIMER_OVERLAPPING) and PROCESS_OUTAGE.absorbed(record))
        client = _current.get()
        return True if client is None else client.keep(record)


_FILTER = _ClientRecords()


def _attach(names: Iterator[str]) -> None:
    """The filter on each of these loggers (once: a logger's filters are a list)."""
    for name in names:
        aiokafka_logger = logging.getLogger(name)
        if _FILTER not in aiokafka_logger.filters:
            aiokafka_logger.addFilter(_FILTER)


class ClientLog:
    """The log of one streamapp client (``kind``: ``"consumer"``, ``"producer"``, ...; and the
    worker's client id): its failed attempts counted in the process's `Outage`, the records
    ``reported_elsewhere`` (logger -> message starts) dropped."""

    def __init__(
        self,
        kind: str,
        client_id: str,
        *,
        reported_elsewhere: Mapping[str, tuple[str, ...]] | None = None,
        outage: Outage | None = None,
    ) -> None:
        self.kind = kind
        self.client_id = client_id
        self.reported_elsewhere = dict(reported_elsewhere or {})
        self.outage = outage if outage is not None else PROCESS_OUTAGE
        self.outage.started(self)
        _attach(iter({*OUTAGE_MESSAGES, TIMERS_LOGGER, *self.reported_elsewhere}))

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
        for start, where in OUTAGE_MESSAGES.get(record.name, {}).items():
            if not message.startswith(start):
                continue
            errors = _errors(record)
            if all(issubclass(error, UNREACHABLE) for error in errors):
                self.outage.failed(self, record, _broker(record, where))
                return False
            if all(issubclass(error, MOVED) for error in errors):
                return not self.outage.absorbed(record)
            return True
        return True

    def close(self) -> None:
        """The client stops: the last of the process's to stop ends an open outage."""
        self.outage.stopped(self)
