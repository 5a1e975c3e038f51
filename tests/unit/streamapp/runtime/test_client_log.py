"""aiokafka's records of a streamapp client while a broker cannot be reached: two lines.

aiokafka's loggers are given the records aiokafka makes, with its own messages and arguments;
the clock is the test's, and the end of the quiet period is the timer's callback, called here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from aiokafka import errors as kafka_errors

from streamapp.runtime import client_log
from streamapp.runtime.client_log import ClientLog

CLIENT = "aiokafka"  # aiokafka/client.py logs under the package's name
FETCHER = "aiokafka.consumer.fetcher"
COORDINATOR = "aiokafka.consumer.group_coordinator"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog


def _lines(log: pytest.LogCaptureFixture) -> list[tuple[str, int, str]]:
    return [(r.name, r.levelno, r.getMessage()) for r in log.records]


#: What aiokafka's records carry while node 2 is down.
REFUSED = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9092)")
NOT_READY = kafka_errors.NodeNotReadyError("Attempt to send a request to node which is not ready")


def _unreachable(clock: Clock, attempts: int) -> None:
    """What aiokafka logs while node 2 is down: per attempt, its connection and its fetch."""
    for _ in range(attempts):
        logging.getLogger(CLIENT).error("Unable connect to node with id %s: %s", 2, REFUSED)
        logging.getLogger(FETCHER).error("Failed fetch messages from %s: %s", 2, NOT_READY)
        clock.now += 0.05


async def test_an_outage_is_one_warning_as_it_starts_and_one_as_it_ends(
    clock: Clock, log: pytest.LogCaptureFixture
) -> None:
    consumer = ClientLog("consumer", "w1", clock=clock)
    with consumer.scope():
        _unreachable(clock, 200)  # 20 s of aiokafka's lines: 400
        logging.getLogger(COORDINATOR).error("Group Coordinator Request failed: %s", "gone")
    assert _lines(log) == [
        (
            client_log.__name__,
            logging.WARNING,
            "streamapp: consumer w1 cannot reach node 2: Unable connect to node with id 2: "
            "[Errno 111] Connect call failed ('127.0.0.1', 9092) (aiokafka's lines for each "
            "further failed attempt are counted, not logged, until they stop for 10 s)",
        )
    ]
    assert consumer._timer is not None  # the end is looked for in QUIET_S
    consumer._timer.cancel()
    clock.now += 3.0
    consumer.check()  # too soon: looked for again, nothing said
    assert len(log.records) == 1 and consumer._timer is not None
    consumer._timer.cancel()
    clock.now += client_log.QUIET_S
    consumer.check()
    assert _lines(log)[1:] == [
        (
            client_log.__name__,
            logging.WARNING,
            "streamapp: consumer w1: the failures to reach node 2 (400) ended (none for 10 s): "
            "401 failed attempt(s) over 10.0 s",
        )
    ]


async def test_an_outage_open_as_the_client_stops_ends_with_it(
    clock: Clock, log: pytest.LogCaptureFixture
) -> None:
    producer = ClientLog("producer", "w1", clock=clock)
    with producer.scope():
        logging.getLogger("aiokafka.producer.sender").warning(
            "Cannot send %r to %s: %r", "ProduceRequest", 3, "NodeNotReadyError"
        )
    producer.close()
    assert [line for _, _, line in _lines(log)][1] == (
        "streamapp: producer w1: the failures to reach node 3 (1) ended (the client stopped): "
        "1 failed attempt(s) over 0.0 s"
    )
    producer.check()  # a timer that fires after the stop says nothing more
    assert len(log.records) == 2


async def test_a_next_outage_is_said_again(clock: Clock, log: pytest.LogCaptureFixture) -> None:
    consumer = ClientLog("consumer", "w1", clock=clock)
    for _ in range(2):
        with consumer.scope():
            _unreachable(clock, 3)
        clock.now += client_log.QUIET_S
        consumer.check()
    assert [level for _, level, _ in _lines(log)] == [logging.WARNING] * 4
    consumer.close()


async def test_records_of_other_clients_and_other_records_pass_as_aiokafka_made_them(
    clock: Clock, log: pytest.LogCaptureFixture
) -> None:
    consumer = ClientLog(
        "consumer",
        "w1",
        clock=clock,
        reported_elsewhere={COORDINATOR: ("Unexpected error in join group",)},
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
    assert consumer.first is None  # no outage opened
    consumer.close()


async def test_tasks_started_in_the_scope_are_the_client_s(
    clock: Clock, log: pytest.LogCaptureFixture
) -> None:
    """As aiokafka's fetcher, coordinator and sender tasks, started in a client's start."""
    consumer = ClientLog("consumer", "w1", clock=clock)
    release = asyncio.Event()

    async def fetch_routine() -> None:
        await release.wait()
        _unreachable(clock, 5)

    with consumer.scope():
        task = asyncio.create_task(fetch_routine())
    release.set()
    await task
    assert len(log.records) == 1
    assert "consumer w1 cannot reach node 2" in log.records[0].getMessage()
    consumer.close()


def test_a_bootstrap_address_is_named_as_host_and_port(
    clock: Clock, log: pytest.LogCaptureFixture
) -> None:
    consumer = ClientLog("consumer", "w1", clock=clock)
    with consumer.scope():
        logging.getLogger(CLIENT).error('Unable connect to "%s:%s": %s', "127.0.0.1", 9, "refused")
    consumer.close()
    assert "the failures to reach 127.0.0.1:9 (1) ended" in log.records[-1].getMessage()


def test_an_error_that_is_no_outage_s_passes_as_aiokafka_made_it(
    clock: Clock, log: pytest.LogCaptureFixture
) -> None:
    """A new changelog's leader not known yet: aiokafka's line, said once, no outage opened."""
    consumer = ClientLog("consumer", "w1", clock=clock)
    moved = kafka_errors.NotLeaderForPartitionError("TopicPartition(topic='t', partition=3)")
    with consumer.scope():
        logging.getLogger(FETCHER).error("Failed fetch offsets from %s: %s", 1, moved)
        logging.getLogger(FETCHER).error("Failed fetch offsets from %s: %s", 1, NOT_READY)
    assert [(r.name, r.levelno) for r in log.records] == [
        (FETCHER, logging.ERROR),  # aiokafka's own
        (client_log.__name__, logging.WARNING),  # the outage that began with the second
    ]
    assert consumer.failures == 1
    consumer.close()
