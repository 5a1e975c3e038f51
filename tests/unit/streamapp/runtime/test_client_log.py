"""aiokafka's records of a worker's streamapp clients while a broker cannot be reached: two
lines for the whole worker, however many clients it has.

aiokafka's loggers are given the records aiokafka makes, with its own messages and arguments
(and mode's timer its own); the clock is the test's, and the end of the quiet period is the
scheduled callback, called here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator

import pytest
from aiokafka import errors as kafka_errors

from streamapp.runtime import client_log
from streamapp.runtime.client_log import ClientLog, Outage

CLIENT = "aiokafka"  # aiokafka/client.py logs under the package's name
FETCHER = "aiokafka.consumer.fetcher"
COORDINATOR = "aiokafka.consumer.group_coordinator"
SENDER = "aiokafka.producer.sender"
WHO = client_log.__name__


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Scheduled:
    """The callbacks the outage scheduled, to be called by the test."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, Callable[[], None]]] = []
        self.cancelled = 0

    def __call__(self, delay: float, callback: Callable[[], None]) -> Scheduled:
        self.calls.append((delay, callback))
        return self

    def cancel(self) -> None:
        self.cancelled += 1

    def fire(self) -> None:
        _, callback = self.calls.pop()
        callback()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def scheduled() -> Scheduled:
    return Scheduled()


class Brokers:
    """Which addresses accept connections (all, unless a test says); the looks at them."""

    def __init__(self) -> None:
        self.down: set[str] = set()
        self.looked: list[str] = []

    def __call__(self, address: str) -> bool:
        self.looked.append(address)
        return address not in self.down


@pytest.fixture
def brokers() -> Brokers:
    return Brokers()


@pytest.fixture
def outage(
    clock: Clock, scheduled: Scheduled, brokers: Brokers, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Outage]:
    """The process's outage, on the test's clock."""
    fresh = Outage(clock=clock, schedule=scheduled, probe=brokers)
    monkeypatch.setattr(client_log, "PROCESS_OUTAGE", fresh)
    yield fresh


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog


def _lines(log: pytest.LogCaptureFixture) -> list[tuple[str, int, str]]:
    return [(r.name, r.levelno, r.getMessage()) for r in log.records]


#: What aiokafka's records carry while node 2 (127.0.0.1:9092) is down.
REFUSED = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9092)")
CLOSED = kafka_errors.KafkaConnectionError("Connection at 127.0.0.1:9092 closed")
NOT_READY = kafka_errors.NodeNotReadyError("Attempt to send a request to node which is not ready")
MOVED = kafka_errors.NotLeaderForPartitionError("TopicPartition(topic='t', partition=3)")


def _unreachable(clock: Clock, attempts: int, node: int = 2) -> None:
    """What aiokafka logs while a node is down: per attempt, its connection and its fetch."""
    for _ in range(attempts):
        logging.getLogger(CLIENT).error("Unable connect to node with id %s: %s", node, REFUSED)
        logging.getLogger(FETCHER).error("Failed fetch messages from %s: %s", node, NOT_READY)
        clock.now += 0.05


def test_an_outage_of_every_client_is_one_warning_as_it_starts_and_one_as_it_ends(
    clock: Clock, scheduled: Scheduled, outage: Outage, log: pytest.LogCaptureFixture
) -> None:
    consumer = ClientLog("consumer", "w1")
    reader = ClientLog("offsets reader", "w1")
    producer = ClientLog("producer", "w1")
    with consumer.scope():
        logging.getLogger(FETCHER).error("Failed fetch messages from %s: %s", 2, CLOSED)
        _unreachable(clock, 100)  # 10 s of aiokafka's lines: 200
        logging.getLogger(COORDINATOR).error("Group Coordinator Request failed: %s", NOT_READY)
    with reader.scope():
        _unreachable(clock, 50)
    with producer.scope():
        logging.getLogger(SENDER).warning(
            "Got error produce response: %s", kafka_errors.NodeNotReadyError("(node id 2).")
        )
    assert _lines(log) == [
        (
            WHO,
            logging.WARNING,
            "streamapp: w1 cannot reach Kafka broker node 2 (127.0.0.1:9092): Failed fetch "
            "messages from 2: KafkaConnectionError: Connection at 127.0.0.1:9092 closed (its "
            "consumer's; its Kafka clients retry, and their failed attempts are counted, not "
            "logged, until they end)",
        )
    ]
    [(delay, _)] = scheduled.calls  # the end is looked for in QUIET_S
    assert delay == client_log.QUIET_S
    clock.now += 3.0
    scheduled.fire()  # too soon: looked for again when it may be over, nothing said
    assert len(log.records) == 1
    assert [delay for delay, _ in scheduled.calls] == [client_log.QUIET_S - 3.0]
    clock.now += client_log.QUIET_S
    scheduled.fire()
    assert _lines(log)[1:] == [
        (
            WHO,
            logging.WARNING,
            "streamapp: w1: the failures to reach Kafka broker node 2 (127.0.0.1:9092) ended "
            "(it accepts connections again): 303 failed attempt(s) in 20.5 s, by its consumer "
            "202, offsets reader 100, producer 1",
        )
    ]
    assert not outage.open
    for client in (consumer, reader, producer):
        client.close()
    assert len(log.records) == 2  # nothing more as the clients stop


def test_what_follows_an_outage_is_counted_in_it_and_left_as_it_is_without_one(
    clock: Clock, scheduled: Scheduled, outage: Outage, log: pytest.LogCaptureFixture
) -> None:
    consumer = ClientLog("consumer", "w1")
    timers = logging.getLogger(client_log.TIMERS_LOGGER)
    overlapping = ("Timer %s is overlapping (interval=%r runtime=%r)", "commit", 2.8, 3.5)
    commit_moved = (
        "OffsetCommit failed for group %s because group is initializing (%s), will retry",
        "g",
        "GroupLoadInProgressError",
    )
    with consumer.scope():
        logging.getLogger(FETCHER).error("Failed fetch offsets from %s: %s", 1, MOVED)
        logging.getLogger(COORDINATOR).info(*commit_moved)
        timers.warning(*overlapping)
        assert [r.name for r in log.records] == [FETCHER, COORDINATOR, client_log.TIMERS_LOGGER]
        _unreachable(clock, 1)
        logging.getLogger(FETCHER).error("Failed fetch offsets from %s: %s", 1, MOVED)
        logging.getLogger(FETCHER).warning(
            "Attempt to fetch offsets for partition %s failed due to: %s",
            "t-0",
            kafka_errors.LeaderNotAvailableError,
        )
        logging.getLogger(COORDINATOR).info(*commit_moved)
    timers.warning("Timer %s is overlapping (interval=%r runtime=%r)", "commit", 2.8, 8.9)
    timers.warning(*overlapping)
    assert len(log.records) == 4  # the outage's WARNING
    clock.now += client_log.QUIET_S
    scheduled.fire()
    assert (
        log.records[-1]
        .getMessage()
        .endswith(
            "2 failed attempt(s) in 10.0 s, by its consumer 2; 3 retried as leaders and the "
            "group's coordinator moved; Faust's commit timer ran up to 8.9 s"
        )
    )
    consumer.close()


def test_a_broker_no_client_tries_any_more_ends_the_outage_once_it_accepts_connections(
    clock: Clock,
    scheduled: Scheduled,
    brokers: Brokers,
    outage: Outage,
    log: pytest.LogCaptureFixture,
) -> None:
    """Its partitions' leaders and the group's coordinator moved: the clients stop trying it
    long before it is back."""
    consumer = ClientLog("consumer", "w1")
    brokers.down.add("127.0.0.1:9092")
    with consumer.scope():
        _unreachable(clock, 4)
    for _ in range(3):  # quiet, but the broker is still down: looked at again a while later
        clock.now += client_log.QUIET_S
        scheduled.fire()
        assert len(log.records) == 1 and len(scheduled.calls) == 1
    assert brokers.looked == ["127.0.0.1:9092"] * 3
    with consumer.scope():  # the failures are long over: a leader moving is aiokafka's line
        logging.getLogger(FETCHER).error("Failed fetch offsets from %s: %s", 1, MOVED)
        _unreachable(clock, 1)  # a client tries it again: counted, not said
    assert [r.name for r in log.records] == [WHO, FETCHER]
    brokers.down.clear()
    clock.now += client_log.QUIET_S
    scheduled.fire()
    assert log.records[-1].getMessage() == (
        "streamapp: w1: the failures to reach Kafka broker node 2 (127.0.0.1:9092) ended (it "
        "accepts connections again): 10 failed attempt(s) in 40.2 s, by its consumer 10"
    )
    consumer.close()


def test_the_first_line_names_the_broker_even_if_the_first_record_does_not(
    clock: Clock, scheduled: Scheduled, outage: Outage, log: pytest.LogCaptureFixture
) -> None:
    consumer = ClientLog("consumer", "w1")
    with consumer.scope():
        logging.getLogger(COORDINATOR).error("Heartbeat send request failed: %s", NOT_READY)
        assert not log.records and outage.open
        _unreachable(clock, 1)
    assert [r.getMessage().split(": ")[1] for r in log.records] == [
        "w1 cannot reach Kafka broker node 2 (127.0.0.1:9092)"
    ]
    # Failures that name no broker, all through: the end line says it all.
    clock.now += client_log.QUIET_S
    scheduled.fire()
    with consumer.scope():
        logging.getLogger(COORDINATOR).error("Group Coordinator Request failed: %s", NOT_READY)
    clock.now += client_log.QUIET_S
    scheduled.fire()
    assert log.records[-1].getMessage() == (
        "streamapp: w1: the failures to reach Kafka broker (unnamed) ended (none for 10 s): 1 "
        "failed attempt(s) in 10.0 s, by its consumer 1"
    )
    assert len(log.records) == 3
    consumer.close()


def test_a_second_broker_that_refuses_connections_is_said_once(
    clock: Clock, outage: Outage, log: pytest.LogCaptureFixture
) -> None:
    consumer = ClientLog("consumer", "w1")
    with consumer.scope():
        _unreachable(clock, 2, node=2)
        # Node 3 not connected yet, or its request timed out: no word of it until the end.
        logging.getLogger(COORDINATOR).error(
            "Error sending %s to node %s [%s] -- marking coordinator dead",
            "HeartbeatRequest",
            3,
            NOT_READY,
        )
        assert len(log.records) == 1
        other = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9093)")
        for _ in range(3):
            logging.getLogger(CLIENT).error("Unable connect to node with id %s: %s", 3, other)
    [_, either] = [r.getMessage() for r in log.records]
    assert either.startswith(
        "streamapp: w1 cannot reach Kafka broker node 3 (127.0.0.1:9093) either: Unable connect"
    )
    consumer.close()
    assert "brokers node 2 (127.0.0.1:9092) (4), node 3 (127.0.0.1:9093) (4) ended" in (
        log.records[-1].getMessage()
    )


def test_a_broker_named_by_its_bootstrap_address_is_the_node_with_that_address(
    clock: Clock, outage: Outage, log: pytest.LogCaptureFixture
) -> None:
    """The changelog watch's admin client bootstraps from the address of the broker that is
    down: the same broker, not another one."""
    watch = ClientLog("changelog watch", "w1")
    consumer = ClientLog("consumer", "w1")
    with consumer.scope():
        _unreachable(clock, 1)
    with watch.scope():
        logging.getLogger(CLIENT).error('Unable connect to "%s:%s": %s', "127.0.0.1", 9092, REFUSED)
    watch.close()
    consumer.close()
    assert [r.getMessage().split(":")[1] for r in log.records] == [
        " w1 cannot reach Kafka broker node 2 (127.0.0.1",
        " w1",
    ]
    assert "broker node 2 (127.0.0.1:9092) ended (the worker's clients stopped): 3 failed" in (
        log.records[-1].getMessage()
    )


def test_the_outage_ends_as_the_worker_s_last_client_stops(
    clock: Clock, scheduled: Scheduled, outage: Outage, log: pytest.LogCaptureFixture
) -> None:
    consumer = ClientLog("consumer", "w1")
    producer = ClientLog("producer", "w1")
    with producer.scope():
        logging.getLogger(SENDER).warning(
            "Cannot send %r to %s: %r", "ProduceRequest", 3, NOT_READY
        )
    producer.close()  # a transactional producer stopped by a rebalance: the outage goes on
    assert outage.open and len(log.records) == 1
    consumer.close()
    assert log.records[-1].getMessage() == (
        "streamapp: w1: the failures to reach Kafka broker node 3 ended (the worker's clients "
        "stopped): 1 failed attempt(s) in 0.0 s, by its producer 1"
    )
    assert scheduled.cancelled == 1
    scheduled.fire()  # a timer that fires after the stop says nothing more
    assert len(log.records) == 2


def test_a_next_outage_is_said_again(
    clock: Clock, scheduled: Scheduled, outage: Outage, log: pytest.LogCaptureFixture
) -> None:
    consumer = ClientLog("consumer", "w1")
    for _ in range(2):
        with consumer.scope():
            _unreachable(clock, 3)
        clock.now += client_log.QUIET_S
        scheduled.fire()
    assert [level for _, level, _ in _lines(log)] == [logging.WARNING] * 4
    consumer.close()


def test_records_of_other_clients_and_other_records_pass_as_aiokafka_made_them(
    clock: Clock, outage: Outage, log: pytest.LogCaptureFixture
) -> None:
    consumer = ClientLog(
        "consumer", "w1", reported_elsewhere={COORDINATOR: ("Unexpected error in join group",)}
    )
    join_error = ("Unexpected error in join group '%s' response: %s", "g", "UnknownError")
    # A plain aiokafka client's: no streamapp client's work.
    _unreachable(clock, 1)
    logging.getLogger(COORDINATOR).error(*join_error)
    with consumer.scope():
        # The client's own, but neither an outage's nor said elsewhere: as it was.
        logging.getLogger(CLIENT).warning("Topic %s is not available during auto-create", "t")
        logging.getLogger(COORDINATOR).error(*join_error)  # said by streamapp's own line
    assert [(name, line) for name, _, line in _lines(log)] == [
        (CLIENT, f"Unable connect to node with id 2: {REFUSED}"),
        (FETCHER, f"Failed fetch messages from 2: {NOT_READY}"),
        (COORDINATOR, "Unexpected error in join group 'g' response: UnknownError"),
        (CLIENT, "Topic t is not available during auto-create"),
    ]
    assert not outage.open  # no outage opened
    # A plain client's records during a streamapp client's outage pass too.
    with consumer.scope():
        _unreachable(clock, 1)
    _unreachable(clock, 1)
    assert [name for name, _, _ in _lines(log)[-3:]] == [WHO, CLIENT, FETCHER]
    consumer.close()


async def test_tasks_started_in_the_scope_are_the_client_s(
    clock: Clock, outage: Outage, log: pytest.LogCaptureFixture
) -> None:
    """As aiokafka's fetcher, coordinator and sender tasks, started in a client's start."""
    consumer = ClientLog("consumer", "w1")
    release = asyncio.Event()

    async def fetch_routine() -> None:
        await release.wait()
        _unreachable(clock, 5)

    with consumer.scope():
        task = asyncio.create_task(fetch_routine())
    release.set()
    await task
    assert len(log.records) == 1
    assert "w1 cannot reach Kafka broker node 2" in log.records[0].getMessage()
    consumer.close()


def test_an_error_that_is_no_outage_s_passes_as_aiokafka_made_it(
    clock: Clock, outage: Outage, log: pytest.LogCaptureFixture
) -> None:
    """A new changelog's leader not known yet: aiokafka's line, said once, no outage opened."""
    consumer = ClientLog("consumer", "w1")
    with consumer.scope():
        logging.getLogger(FETCHER).error("Failed fetch offsets from %s: %s", 1, MOVED)
        logging.getLogger(FETCHER).error("Failed fetch offsets from %s: %s", 1, NOT_READY)
        # Neither an outage's error nor what follows one: an authorization failure, say.
        logging.getLogger(FETCHER).error(
            "Failed fetch messages from %s: %s", 1, kafka_errors.TopicAuthorizationFailedError()
        )
    assert [(r.name, r.levelno) for r in log.records] == [
        (FETCHER, logging.ERROR),  # aiokafka's own
        (WHO, logging.WARNING),  # the outage that began with the second
        (FETCHER, logging.ERROR),
    ]
    assert outage.failures == 1
    consumer.close()


def test_the_process_outage_ends_on_a_timer_thread(
    monkeypatch: pytest.MonkeyPatch, log: pytest.LogCaptureFixture
) -> None:
    """Records come from the worker's threads and event loops: the end is a thread's timer."""
    outage = Outage(quiet_s=0.05, probe=lambda _address: True)
    monkeypatch.setattr(client_log, "PROCESS_OUTAGE", outage)
    consumer = ClientLog("consumer", "w1")
    with consumer.scope():
        logging.getLogger(CLIENT).error("Unable connect to node with id %s: %s", 2, REFUSED)
    for _ in range(200):  # the timer's line, on its thread (waited for, not timed)
        if not outage.open:
            break
        time.sleep(0.05)
    assert [r.getMessage().split(" (")[0] for r in log.records] == [
        "streamapp: w1 cannot reach Kafka broker node 2",
        "streamapp: w1: the failures to reach Kafka broker node 2",
    ]
    assert log.records[-1].threadName != log.records[0].threadName
    consumer.close()
