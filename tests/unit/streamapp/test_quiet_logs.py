"""`streamapp.quiet_logs`: a worker's routine steps at DEBUG, every real warning kept."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from streamapp import quiet_logs

#: (logger, level, message, args) as Faust, mode and aiokafka log them.
CHATTER = [
    (
        "aiokafka.consumer.group_coordinator",
        logging.WARNING,
        "Heartbeat failed for group %s because it is rebalancing",
        ("g",),
    ),
    (
        "aiokafka.consumer.group_coordinator",
        logging.INFO,
        "Setting newly assigned partitions %s for group %s",
        ({"t"}, "g"),
    ),
    ("aiokafka.consumer.group_coordinator", logging.INFO, "(Re-)joining group %s", ("g",)),
    (
        "aiokafka.consumer.group_coordinator",
        logging.ERROR,
        "OffsetCommit failed for group %s due to group error (%s), will rejoin",
        ("g", "RebalanceInProgressError"),
    ),
    (
        "aiokafka.consumer.subscription_state",
        logging.INFO,
        "Updating subscribed topics to: %s",
        (frozenset({"t"}),),
    ),
    ("faust.app.base", logging.INFO, "[^--Web]: Starting...", ()),
    (
        "faust.agents.agent",
        logging.INFO,
        "[^---Agent: counting.counting[.]count_events]: Starting...",
        (),
    ),
    ("faust.producer", logging.INFO, "[^--Producer]: Creating topic %r", ("counts",)),
    ("faust.worker", logging.INFO, "[^Worker]: Ready", ()),
]

#: Lines a person needs, and real problems of the same libraries: left as they are.
KEPT = [
    ("streamapp.runtime.rebalance", logging.INFO, "Worker ready", ()),
    ("faust.worker", logging.INFO, "[^Worker]: Starting...", ()),
    ("faust.worker", logging.INFO, "[^Worker]: Stopping...", ()),
    ("streamapp.partition_assignor", logging.INFO, "streamapp: planned generation %d", (2,)),
    ("standby.runtime", logging.INFO, "streamapp: processing resumed after %.2f s", (0.5,)),
    (
        "aiokafka.consumer.group_coordinator",
        logging.WARNING,
        "Heartbeat failed for group %s: generation id is not  current.",
        ("g",),
    ),
    ("aiokafka.consumer.group_coordinator", logging.ERROR, "Heartbeat failed: %r", ("x",)),
    (
        "aiokafka.consumer.group_coordinator",
        logging.ERROR,
        "OffsetCommit failed for group %s on partition %s with offset %s: %s",
        ("g", "t-0", 5, "OffsetMetadataTooLarge"),
    ),
    ("streamapp.runtime.commits", logging.INFO, "streamapp: a commit was refused (%r)", ("x",)),
]


@pytest.fixture
def shown() -> Iterator[list[logging.LogRecord]]:
    """Records an INFO handler on the root logger emits, with quiet_logs installed."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.INFO)
    factory = logging.getLogRecordFactory()
    root_level = logging.root.level
    logging.root.addHandler(handler)
    logging.root.setLevel(logging.DEBUG)
    quiet_logs.install()
    quiet_logs.install()  # idempotent: one wrapper
    try:
        yield records
    finally:
        logging.setLogRecordFactory(factory)
        logging.root.removeHandler(handler)
        logging.root.setLevel(root_level)


@pytest.mark.parametrize(("name", "level", "message", "args"), CHATTER)
def test_chatter_goes_to_debug(
    shown: list[logging.LogRecord], name: str, level: int, message: str, args: tuple
) -> None:
    logging.getLogger(name).log(level, message, *args)
    assert shown == []
    record = logging.getLogRecordFactory()(name, level, "f", 1, message, args, None)
    assert record.levelno == logging.DEBUG and record.levelname == "DEBUG"


@pytest.mark.parametrize(("name", "level", "message", "args"), KEPT)
def test_what_a_person_needs_and_every_problem_is_kept(
    shown: list[logging.LogRecord], name: str, level: int, message: str, args: tuple
) -> None:
    logging.getLogger(name).log(level, message, *args)
    assert [(r.levelno, r.msg) for r in shown] == [(level, message)]


def test_the_worker_installs_it() -> None:
    from streamapp.faust_worker import Worker

    factory = logging.getLogRecordFactory()
    try:
        worker = Worker.__new__(Worker)
        worker.spinner = None
        worker.on_setup_root_logger(logging.getLogger("streamapp-test-root"), logging.INFO)
        assert getattr(logging.getLogRecordFactory(), "streamapp_quiet", False)
    finally:
        logging.setLogRecordFactory(factory)


NOT_FOUND = "Topic %s not found in cluster metadata"


def test_aiokafka_not_found_lines_about_a_topic_streamapp_explains_go_to_debug(
    shown: list[logging.LogRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quiet_logs, "_explained", set())
    cluster = logging.getLogger("aiokafka.cluster")
    cluster.error(NOT_FOUND, "app-counts-changelog")
    quiet_logs.explain_topics(["app-counts-changelog"])
    for _ in range(3):
        cluster.error(NOT_FOUND, "app-counts-changelog")
    # A source topic deleted: aiokafka's line is the only word of it, and stays.
    cluster.error(NOT_FOUND, "app-events")
    # Other problems of an explained topic stay too.
    cluster.error("Topic %s is not authorized for this client", "app-counts-changelog")
    assert [r.getMessage() for r in shown] == [
        "Topic app-counts-changelog not found in cluster metadata",
        "Topic app-events not found in cluster metadata",
        "Topic app-counts-changelog is not authorized for this client",
    ]
