"""streamapp's table expires a Faust windowed table's windows from its own index, recovered ones
too (faust-streaming/faust #385), as Faust's cleanup does for the windows it wrote.

A real rocksdict store in a temporary directory; the producer is a stand-in that keeps the
changelog records Faust hands it, so no broker is needed. Cleanups are run at a given clock.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import faust
import pytest
from faust.streams import _current_event
from faust.types import TP

from streamapp import App
from streamapp.expiring_tables import Table

SIZE, EXPIRES = 10.0, 60.0
EVENT_TS = 1_000.0  # the events' timestamp: their window is (1000.0, 1009.9)
WINDOW = (1_000.0, 1_009.9)


class _Producer:
    """Keeps what Faust would produce (the changelog records of table writes)."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send_soon(self, fut: Any) -> None:
        self.sent.append(fut.message)

    def key_partition(self, topic: str, key: bytes) -> TP:
        return TP(topic, 2)


@pytest.fixture(autouse=True)
def current_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """Faust makes each changelog record's future on the thread's current event loop."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        asyncio.set_event_loop(None)
        loop.close()


@pytest.fixture
def in_stream() -> Iterator[None]:
    """Code runs as an agent does: on a record of partition 2 of the source topic."""
    event = mock.Mock()
    event.message.partition = 2
    event.message.topic = "source"
    event.message.timestamp = EVENT_TS
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


def _windowed(app: faust.App, on_window_close: Any = None) -> tuple[Any, _Producer]:
    producer = _Producer()
    app._producer = producer  # Faust's app keeps its producer there; no broker here
    table = app.Table(
        "counts", default=int, partitions=4, on_window_close=on_window_close
    ).tumbling(SIZE, expires=EXPIRES)
    # The source topic's partition count is checked against the broker's metadata.
    table.table._verify_source_topic_partitions = lambda topic: None
    return table, producer


def _stored_keys(table: Any, partition: int = 2) -> list[bytes]:
    return list(table.data.keys_of(partition))


def _run(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    return loop.run_until_complete(coro)


def test_streamapp_apps_make_this_table(tmp_path: Path) -> None:
    assert isinstance(App("expiry-test", datadir=str(tmp_path)).Table("t"), Table)


def test_a_window_expires_once_it_is_stale_for_expires(
    tmp_path: Path, in_stream: None, current_loop: asyncio.AbstractEventLoop
) -> None:
    closed: list[tuple[Any, Any]] = []
    app = App("expiry-test", datadir=str(tmp_path), topic_partitions=4)
    windowed, producer = _windowed(app, lambda key, value: closed.append((key, value)))
    table = windowed.table
    windowed["a"] += 1
    windowed["a"] += 1
    windowed["b"] += 5
    assert _stored_keys(table) == [b'["a",[1000.0,1009.9]]', b'["b",[1000.0,1009.9]]']
    end = WINDOW[1]
    # Not stale yet: the window's end is not older than expires.
    assert _run(current_loop, table.delete_expired_windows(now=end + EXPIRES - SIZE)) == 0
    assert len(_stored_keys(table)) == 2 and closed == []
    assert _run(current_loop, table.delete_expired_windows(now=end + EXPIRES + SIZE)) == 2
    assert _stored_keys(table) == []
    assert closed == [(("a", WINDOW), 2), (("b", WINDOW), 5)]
    # Deleted from the store, as Faust's cleanup does: no changelog record of it.
    assert [m.value for m in producer.sent] == [b"1", b"2", b"5"]
    assert _run(current_loop, table.delete_expired_windows(now=end + 10 * EXPIRES)) == 0


def test_recovered_windows_expire(
    tmp_path: Path, in_stream: None, current_loop: asyncio.AbstractEventLoop
) -> None:
    """Windows the store holds from before the process started (restored from RocksDB or the
    changelog) expire like those written since."""
    first = App("expiry-test", datadir=str(tmp_path), topic_partitions=4)
    windowed, _ = _windowed(first)
    windowed["old"] += 1
    assert _stored_keys(windowed.table) == [b'["old",[1000.0,1009.9]]']
    windowed.table.data.close_partition(2)

    # The next process: the same data dir, nothing written yet.
    second = App("expiry-test", datadir=str(tmp_path), topic_partitions=4)
    windowed, _ = _windowed(second)
    table = windowed.table
    changelog = table.changelog_topic_name
    table.data.handle(2)  # the recovery opened the partition's store
    assert _stored_keys(table) == [b'["old",[1000.0,1009.9]]']
    later = WINDOW[1] + 10 * EXPIRES
    assert _run(current_loop, table.delete_expired_windows(now=later)) == 0  # not known yet
    _run(current_loop, table.on_recovery_completed({TP(changelog, 2)}, set()))
    assert _run(current_loop, table.delete_expired_windows(now=later)) == 1
    assert _stored_keys(table) == []


def test_a_recovery_drops_the_partitions_no_longer_active(
    tmp_path: Path, current_loop: asyncio.AbstractEventLoop
) -> None:
    app = App("expiry-test", datadir=str(tmp_path), topic_partitions=4)
    windowed, _ = _windowed(app)
    table = windowed.table
    for partition in (1, 2):
        event = mock.Mock()
        event.message.partition = partition
        event.message.topic = "source"
        event.message.timestamp = EVENT_TS
        token = _current_event.set(weakref.ref(event))
        try:
            windowed[f"p{partition}"] += 1
        finally:
            _current_event.reset(token)
    changelog = table.changelog_topic_name
    # Partition 1 moved to another worker (standby here); only partition 2 is active.
    _run(current_loop, table.on_recovery_completed({TP(changelog, 2)}, {TP(changelog, 1)}))
    later = WINDOW[1] + 10 * EXPIRES
    assert _run(current_loop, table.delete_expired_windows(now=later)) == 1
    assert _stored_keys(table, 1) == [b'["p1",[1000.0,1009.9]]']  # not this worker's to delete
    assert _stored_keys(table, 2) == []


def test_a_deleted_window_sends_a_tombstone_and_is_not_expired_again(
    tmp_path: Path, in_stream: None, current_loop: asyncio.AbstractEventLoop
) -> None:
    closed: list[Any] = []
    app = App("expiry-test", datadir=str(tmp_path), topic_partitions=4)
    windowed, producer = _windowed(app, lambda key, value: closed.append(key))
    table = windowed.table
    windowed["a"] += 1
    del table[("a", WINDOW)]
    assert [(m.key, m.value, m.partition) for m in producer.sent] == [
        (b'["a",[1000.0,1009.9]]', b"1", 2),
        (b'["a",[1000.0,1009.9]]', None, 2),  # the deletion's tombstone
    ]
    assert _run(current_loop, table.delete_expired_windows(now=WINDOW[1] + 10 * EXPIRES)) == 0
    assert closed == []


def test_now_in_an_agent_reads_the_latest_window_written(tmp_path: Path, in_stream: None) -> None:
    app = App("expiry-test", datadir=str(tmp_path), topic_partitions=4)
    windowed, _ = _windowed(app)
    windowed["a"] += 3
    assert windowed["a"].now() == 3
    assert windowed.relative_to_now()["a"].value() == 3


def test_cleanups_match_fausts_own(tmp_path: Path, current_loop: asyncio.AbstractEventLoop) -> None:
    """The same writes and one cleanup, by Faust's table and by streamapp's: the same changelog
    records, the same windows left in the store, the same windows reported closed."""
    now = 5_000.0
    results = []
    for name, table_class in (("faust", faust.Table), ("streamapp", Table)):
        closed: list[tuple[Any, Any]] = []
        app = App(f"expiry-{name}", datadir=str(tmp_path / name), Table=table_class)
        windowed, producer = _windowed(
            app, lambda key, value, closed=closed: closed.append((key, value))
        )
        table = windowed.table
        assert type(table) is table_class
        for ts in (1_000.0, 1_004.0, 1_015.0, 4_990.0):
            event = mock.Mock()
            event.message.partition = 2
            event.message.topic = "source"
            event.message.timestamp = ts
            token = _current_event.set(weakref.ref(event))
            try:
                windowed["k"] += 1
                windowed[f"at-{ts}"] += 1
            finally:
                _current_event.reset(token)
        if table_class is faust.Table:
            with mock.patch("time.time", return_value=now):
                _run(current_loop, table._del_old_keys())
        else:
            _run(current_loop, table.delete_expired_windows(now=now))
        sent = [(m.key, m.value, m.partition) for m in producer.sent]
        results.append((sent, sorted(_stored_keys(table)), sorted(closed, key=repr)))
    assert results[0] == results[1]
    assert results[1][1] == [b'["at-4990.0",[4990.0,4999.9]]', b'["k",[4990.0,4999.9]]']
    assert len(results[1][2]) == 5  # two windows of "k", and one of each older "at-"
