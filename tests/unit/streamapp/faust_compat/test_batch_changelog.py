"""A batch's table writes go to the Kafka client's producer together as the batch ends (issue 16).

A real rocksdict store in a temporary directory and Faust's own producer object, whose aiokafka
producers are stand-ins that keep what they are sent and hand back futures the test resolves
(no broker). Faust's buffered path (``send_soon``) is recorded, to show it is not taken.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from aiokafka.structs import RecordMetadata, TopicPartition
from faust.streams import _current_event
from faust.transport.drivers.aiokafka import Producer as FaustProducer
from faust.types import TP

from streamapp import App
from streamapp.faust_compat import batch_changelog

SOURCE = TP("source", 2)
CHANGELOG = "batch-test-counts-changelog"


class _AioProducer:
    """aiokafka's producer as the batch path uses it: ``send`` appends and returns a future."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, int | None]] = []
        self.futures: list[asyncio.Future[Any]] = []

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: Any = None,
    ) -> asyncio.Future[Any]:
        self.sent.append((topic, key, value, partition))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


def _delivered(fut: asyncio.Future[Any], offset: int) -> None:
    tp = TopicPartition(CHANGELOG, 2)
    fut.set_result(RecordMetadata(CHANGELOG, 2, tp, offset, -1, 0, 0))


@pytest.fixture
def in_batch() -> Iterator[None]:
    """Code runs as a batch agent does: the current event is the batch's last record."""
    event = mock.Mock()
    event.message.partition = SOURCE.partition
    event.message.topic = SOURCE.topic
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)
        batch_changelog.forget()


def _app(tmp_path: Path, **options: Any) -> tuple[Any, Any, list[Any]]:
    """An app, its table, and what Faust's buffered path was given."""
    app = App("batch-test", datadir=str(tmp_path), topic_partitions=4, **options)
    app.in_worker = True  # Faust is in a transaction under exactly_once in a worker only
    faust_producer = app.producer
    assert isinstance(faust_producer, FaustProducer)
    buffered: list[Any] = []
    faust_producer.send_soon = buffered.append  # type: ignore[method-assign]
    app.maybe_start_producer = mock.AsyncMock(return_value=faust_producer)
    table = app.Table("counts", default=int, partitions=4)
    table._verify_source_topic_partitions = lambda topic: None
    return app, table, buffered


async def test_a_batch_sends_its_changelog_records_in_order_at_its_end(
    tmp_path: Path, in_batch: None
) -> None:
    app, counts, buffered = _app(tmp_path)
    aio = _AioProducer()
    app.producer._producer = aio
    changelog = batch_changelog.begin(app, SOURCE)
    assert changelog is not None
    counts["a"] += 1
    counts["a"] += 1
    counts["b"] = 5
    del counts["b"]
    # Written to the store at once (reads in the batch see them), nothing sent yet.
    assert counts["a"] == 2 and "b" not in counts
    assert aio.sent == [] and buffered == []
    await batch_changelog.end(changelog)
    assert batch_changelog.current() is None
    assert aio.sent == [
        (CHANGELOG, b'"a"', b"1", 2),
        (CHANGELOG, b'"a"', b"2", 2),
        (CHANGELOG, b'"b"', b"5", 2),
        (CHANGELOG, b'"b"', None, 2),  # the deletion, after the write it deletes
    ]
    assert buffered == []  # Faust's per-record path was not taken
    store = counts.data
    changelog_tp = TP(CHANGELOG, 2)
    assert store.persisted_offset(changelog_tp) is None
    with mock.patch.object(store, "set_persisted_offset", wraps=store.set_persisted_offset) as spy:
        for offset, fut in enumerate(aio.futures[:-1], start=10):
            _delivered(fut, offset)
        await asyncio.sleep(0)
        assert spy.call_count == 0  # the offset waits for the partition's last record
        _delivered(aio.futures[-1], 13)
        await asyncio.sleep(0)
    assert spy.call_count == 1
    assert store.persisted_offset(changelog_tp) == 13


async def test_a_failed_delivery_writes_no_offset(tmp_path: Path, in_batch: None) -> None:
    app, counts, _ = _app(tmp_path)
    aio = _AioProducer()
    app.producer._producer = aio
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] = 1
    await batch_changelog.end(changelog)
    aio.futures[-1].set_exception(RuntimeError("not delivered"))
    await asyncio.sleep(0)
    assert counts.data.persisted_offset(TP(CHANGELOG, 2)) is None


async def test_writes_outside_a_batch_keep_fausts_path(tmp_path: Path, in_batch: None) -> None:
    app, counts, buffered = _app(tmp_path)
    aio = _AioProducer()
    app.producer._producer = aio
    counts["a"] = 1
    assert aio.sent == [] and len(buffered) == 1


async def test_exactly_once_sends_in_the_batchs_transaction_under_its_lock(
    tmp_path: Path, in_batch: None
) -> None:
    app, counts, buffered = _app(tmp_path, processing_guarantee="exactly_once")
    plain, transactional = _AioProducer(), _AioProducer()
    faust_producer = app.producer
    faust_producer._producer = plain
    faust_producer._transaction_producers = {"tid-2": transactional}
    lock = asyncio.Lock()
    faust_producer._trn_locks = {"tid-2": lock}
    with mock.patch.object(batch_changelog, "source_transactional_id", return_value="tid-2") as tid:
        changelog = batch_changelog.begin(app, SOURCE)
    tid.assert_called_once_with(app, SOURCE)
    counts["a"] = 1
    await lock.acquire()  # a commit (or the next begin) of the transaction is under way
    ending = asyncio.ensure_future(batch_changelog.end(changelog))
    for _ in range(5):
        await asyncio.sleep(0)
    assert transactional.sent == [] and not ending.done()
    lock.release()
    await ending
    assert transactional.sent == [(CHANGELOG, b'"a"', b"1", 2)]
    assert plain.sent == [] and buffered == []
    with mock.patch.object(app.tables, "persist_offset_on_commit") as on_commit:
        _delivered(transactional.futures[-1], 7)
        await asyncio.sleep(0)
    # Under exactly_once the store's offset is written when the transaction commits, as Faust's.
    on_commit.assert_called_once_with(counts.data, TP(CHANGELOG, 2), 7)
    assert counts.data.persisted_offset(TP(CHANGELOG, 2)) is None


async def test_no_transaction_for_the_source_keeps_fausts_path(
    tmp_path: Path, in_batch: None
) -> None:
    app, _, _ = _app(tmp_path, processing_guarantee="exactly_once")
    with mock.patch.object(batch_changelog, "source_transactional_id", return_value=None):
        assert batch_changelog.begin(app, SOURCE) is None
    assert batch_changelog.current() is None


async def test_a_threaded_producer_keeps_fausts_path(tmp_path: Path, in_batch: None) -> None:
    app, counts, buffered = _app(tmp_path, producer_threaded=True)
    assert batch_changelog.begin(app, SOURCE) is None
    counts["a"] = 1
    assert len(buffered) == 1
