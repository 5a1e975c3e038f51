"""Changelog records a replay applies as their bytes (`streamapp.runtime.changelog_apply`): the
same store as Faust's decoding path, taken only for the tables where it provably is, and a
batch with an undecodable record handled as before. Real rocksdict stores, no broker."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka import ConsumerRecord
from faust.types import TP

from streamapp import App
from streamapp.changelog_records import UndecodableChangelogRecord
from streamapp.runtime.changelog_apply import RawChangelog
from streamapp.runtime.messages import consumer_message as raw_message
from streamapp.runtime.pending_writes import OFFSET_KEY


def _record(topic: str, offset: int, key: bytes | None, value: bytes | None) -> Any:
    return ConsumerRecord(topic, 0, offset, 1000, 0, key, value, None, 1, 1, [])


def _app(tmp_path: Path) -> Any:
    return App("sa-raw", num_standby_replicas=0, datadir=str(tmp_path))


def _stored(table: Any) -> dict[bytes, bytes]:
    return {k: v for k, v in table.data.handle(0).items() if k != OFFSET_KEY}


async def _apply(app: Any, table: Any, records: list[Any]) -> None:
    tp = TP(table.changelog_topic.get_topic_name(), 0)
    await app.tables.apply_records(tp, records)


class Product(faust.Record):
    name: str


def test_the_raw_path_is_taken_only_where_it_is_the_same_result(tmp_path: Path) -> None:
    app = _app(tmp_path)
    seen: list[Any] = []

    async def on_event(event: Any) -> None:
        seen.append(event)

    taken = {
        "counts": app.Table("counts", default=int, partitions=1),
        "products": app.Table("products", value_type=Product, partitions=1),
        "windowed": app.Table("windowed", default=int, partitions=1).tumbling(60).table,
        "global": app.GlobalTable("global", partitions=1),
    }
    kept = {
        "sets": app.SetTable("sets", partitions=1),
        "callback": app.Table("callback", partitions=1, on_changelog_event=on_event),
        "memory": app.Table("memory", partitions=1, store="memory://memory"),
    }
    assert {name: RawChangelog.of(t) is not None for name, t in taken.items()} == dict.fromkeys(
        taken, True
    )
    assert {name: RawChangelog.of(t) is not None for name, t in kept.items()} == dict.fromkeys(
        kept, False
    )


async def test_the_store_ends_as_faust_path_leaves_it(tmp_path: Path) -> None:
    records = [
        (b'"a"', b"1"),
        (b'"b"', b"2"),
        (b'"a"', b"3"),
        (b'"b"', None),  # a deletion
        (b'"c"', b'{"x": [1, 2]}'),
    ]
    stores = []
    for raw in (True, False):
        app = _app(tmp_path / str(raw))
        table = app.Table("t", partitions=1)
        if not raw:
            table.__dict__["_streamapp_raw_changelog"] = None  # Faust's decoding path
        else:
            assert RawChangelog.of(table) is not None
        topic = table.changelog_topic.get_topic_name()
        await _apply(app, table, [_record(topic, i, k, v) for i, (k, v) in enumerate(records)])
        stores.append((_stored(table), table.data.persisted_offset(TP(topic, 0))))
    assert stores[0] == stores[1] == ({b'"a"': b"3", b'"c"': b'{"x": [1, 2]}'}, 4)


async def test_a_batch_with_an_undecodable_record_is_handled_as_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = _app(tmp_path)
    table = app.Table("t", partitions=1)
    topic = table.changelog_topic.get_topic_name()
    good = [_record(topic, 0, b'"a"', b"1"), _record(topic, 2, b'"b"', b"2")]
    with caplog.at_level(logging.WARNING):
        await _apply(app, table, [good[0], _record(topic, 1, b'"x"', b"{{"), good[1]])
    assert _stored(table) == {b'"a"': b"1", b'"b"': b"2"}
    assert table.data.persisted_offset(TP(topic, 0)) == 2
    assert "offset 1" in caplog.text and "cannot be used" in caplog.text
    assert app.streamapp_bad_records.counts.as_json() == {topic: {"skipped": 1, "dead_lettered": 0}}


async def test_a_record_passes_the_check_exactly_when_faust_decodes_it(tmp_path: Path) -> None:
    app = _app(tmp_path)
    tables = [
        app.Table("counts", default=int, partitions=1),
        app.Table("products", value_type=Product, partitions=1),
        app.Table("raw", key_type=bytes, value_type=bytes, partitions=1),
    ]
    product = Product(name="x").dumps(serializer="json")
    values = [b"1", b'"s"', b"{{", b"\xff", product, b'{"name": 3}', None]
    keys = [b'"k"', b"k", b"\xff\xfe"]
    for table in tables:
        raw = RawChangelog.of(table)
        assert raw is not None
        topic = table.changelog_topic
        tp = TP(topic.get_topic_name(), 0)
        for key in keys:
            for value in values:
                record = _record(tp.topic, 0, key, value)
                # The changelog topic's decode: a stand-in for a record that does not decode.
                event = await topic.decode(raw_message(tp, record), propagate=True)
                faust_decodes = not isinstance(event, UndecodableChangelogRecord)
                assert raw.apply(tp, [record]) is faust_decodes, (table.name, key, value)
