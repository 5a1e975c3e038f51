"""A streamapp table write encodes its key and value once, to the same bytes Faust wrote.

A real rocksdict store in a temporary directory; the producer is a stand-in that keeps the
changelog records Faust hands it, so no broker is needed. JSON encodings are counted where
Faust's json codec calls them. No timing is measured.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import faust
import faust.utils.json as faust_json
import pytest
from faust.streams import _current_event
from faust.types import TP

from streamapp import App
from streamapp.codecs import json_once
from streamapp.table_writes.encode_once import Table


class _Producer:
    """Keeps what Faust would produce (the changelog records of table writes)."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send_soon(self, fut: Any) -> None:
        self.sent.append(fut.message)

    def key_partition(self, topic: str, key: bytes) -> TP:
        return TP(topic, 0)


def _app_and_producer(app: faust.App) -> _Producer:
    producer = _Producer()
    app._producer = producer  # Faust's app keeps its producer there; no broker here
    return producer


@pytest.fixture(autouse=True)
def current_loop() -> Iterator[None]:
    """Faust makes each changelog record's future on the thread's current event loop, as an
    agent's write does on the worker's; whether one was left set by earlier tests (a unit run
    of tests/unit/tables first left none) must not decide these tests."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        asyncio.set_event_loop(None)
        loop.close()


@pytest.fixture
def in_stream() -> Iterator[None]:
    """Code runs as an agent does: on a record of partition 2 of the source topic."""
    event = mock.Mock()
    event.message.partition = 2
    event.message.topic = "source"
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


@pytest.fixture
def json_dumps() -> Iterator[list[str]]:
    """What Faust's json codec encoded while the test runs, in order: through the codec, or
    through its fast path (`json_once`), not counting the probes that path is checked with."""
    encoded: list[str] = []
    real = faust_json.dumps
    real_dumps_for, real_loads_for = json_once.dumps_for, json_once.loads_for
    resolving = False

    def counting(obj: Any, *args: Any, **kwargs: Any) -> str:
        text = str(real(obj, *args, **kwargs))
        if not resolving:
            encoded.append(text)
        return text

    def resolved(resolve: Any) -> Any:
        def resolving_only(*args: Any) -> Any:
            nonlocal resolving
            resolving = True
            try:
                return resolve(*args)
            finally:
                resolving = False

        return resolving_only

    def counting_dumps_for(codec: Any) -> Any:
        fast = resolved(real_dumps_for)(codec)
        if fast is None:
            return None

        def counted(obj: Any) -> bytes:
            data: bytes = fast(obj)
            encoded.append(data.decode())
            return data

        return counted

    with (
        mock.patch.object(faust_json, "dumps", counting),
        mock.patch.object(json_once, "dumps_for", counting_dumps_for),
        mock.patch.object(json_once, "loads_for", resolved(real_loads_for)),
    ):
        yield encoded


def _table(app: faust.App, **options: Any) -> Any:
    table = app.Table("counts", default=int, partitions=4, **options)
    # The source topic's partition count is checked against the broker's metadata.
    table._verify_source_topic_partitions = lambda topic: None
    return table


def _stored(table: Any, key_bytes: bytes) -> bytes | None:
    value: bytes | None = table.data.handle(2).get(key_bytes)
    return value


def test_streamapp_apps_make_this_table(tmp_path: Path) -> None:
    assert isinstance(App("encode-test", datadir=str(tmp_path)).Table("t"), Table)


def test_one_increment_encodes_key_and_value_once(
    tmp_path: Path, in_stream: None, json_dumps: list[str]
) -> None:
    app = App("encode-test", datadir=str(tmp_path), topic_partitions=4)
    producer = _app_and_producer(app)
    counts = _table(app)
    counts["k"] += 1  # a new key
    assert json_dumps == ['"k"', "1"]
    del json_dumps[:]
    counts["k"] += 1  # an existing one: the read's key encoding serves the write
    assert json_dumps == ["2"]
    del json_dumps[:]
    counts["other"] += 5
    assert json_dumps == ['"other"', "5"]
    assert counts["k"] == 2 and counts["other"] == 5 and counts["missing"] == 0
    # One changelog record per write, of the bytes the store holds, on the record's partition.
    assert [(m.key, m.value, m.partition) for m in producer.sent] == [
        (b'"k"', b"1", 2),
        (b'"k"', b"2", 2),
        (b'"other"', b"5", 2),
    ]
    assert _stored(counts, b'"k"') == b"2"
    assert producer.sent[0].channel.get_topic_name() == "encode-test-counts-changelog"


def test_the_bytes_are_those_faust_writes(tmp_path: Path, in_stream: None) -> None:
    writes = [("a", 1), ("b", {"x": [1, 2]}), ("a", "text"), (7, None)]
    results = []
    for name, table_class in (("faust", faust.Table), ("streamapp", Table)):
        app = App(f"encode-{name}", datadir=str(tmp_path / name), Table=table_class)
        producer = _app_and_producer(app)
        table = _table(app)
        assert type(table) is table_class
        for key, value in writes:
            table[key] = value
        stored = {(m.key, _stored(table, m.key)) for m in producer.sent if m.value is not None}
        results.append(([(m.key, m.value, m.partition) for m in producer.sent], stored))
    assert results[0] == results[1]


def test_a_mutable_key_is_encoded_again(
    tmp_path: Path, in_stream: None, json_dumps: list[str]
) -> None:
    app = App("encode-test", datadir=str(tmp_path), topic_partitions=4)
    _app_and_producer(app)
    table = _table(app)
    key = ["a"]
    table[key] = 1
    key.append("b")  # changed in place: the bytes of its last encoding no longer hold
    table[key] = 2
    assert json_dumps == ['["a"]', "1", '["a","b"]', "2"]


def test_a_table_whose_changelog_encodes_otherwise_keeps_fausts_way(
    tmp_path: Path, in_stream: None
) -> None:
    results = []
    for name, table_class in (("faust", faust.Table), ("streamapp", Table)):
        app = App(f"encode-{name}", datadir=str(tmp_path / name), Table=table_class)
        producer = _app_and_producer(app)
        # A changelog of other serializers than the table's: its bytes are not the store's.
        changelog = app.topic("custom-changelog", key_serializer="raw", value_serializer="raw")
        table = _table(app, changelog_topic=changelog)
        table["k"] = b"v"
        table["k"] = b"w"
        results.append(([(m.key, m.value) for m in producer.sent], _stored(table, b'"k"')))
        if table_class is Table:
            assert not table._encodes_once
    assert results[0] == results[1]


def test_a_memory_store_keeps_fausts_way(tmp_path: Path, in_stream: None) -> None:
    app = App("encode-test", datadir=str(tmp_path), store="memory://", topic_partitions=4)
    producer = _app_and_producer(app)
    table = _table(app)
    table["k"] += 3
    assert table["k"] == 3 and not table._encodes_once
    assert [(m.key, m.value) for m in producer.sent] == [(b'"k"', b"3")]
