"""Changelog records a table cannot decode: stood in for, counted once, never stored."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, cast

import faust
import pytest
from faust.types import TP, Message

from streamapp import App
from streamapp.changelog_records import (
    SkipsUndecodableChangelogRecords,
    UndecodableChangelogRecord,
    changelog_table,
    skips_undecodable,
)

TOPIC = "app-t-changelog"


def _message(
    offset: int, key: bytes = b'"k"', value: bytes | None = b"1", partition: int = 0
) -> Message:
    return Message(TOPIC, partition, offset, 0.0, 0, None, key, value, None)


def _event(offset: int, partition: int = 0) -> faust.Event:
    return faust.Event(cast(Any, None), "k", 1, None, _message(offset, partition=partition))


def _stand_in(offset: int, partition: int = 0) -> UndecodableChangelogRecord:
    message = _message(offset, b"\xff", b"{{", partition)
    return UndecodableChangelogRecord(cast(Any, None), None, None, None, message)


class _Store:
    def __init__(self) -> None:
        self.rows: dict[tuple[int, int], Any] = {}
        self.offsets: dict[TP, int] = {}

    def set_persisted_offset(self, tp: TP, offset: int) -> None:
        self.offsets[tp] = offset


class _Table:
    """Faust's side of a table, as far as the mixin meets it."""

    def __init__(self) -> None:
        self.data = _Store()
        self.batches: list[list[Any]] = []
        self.changelog_events: list[Any] = []

    def apply_changelog_batch(self, batch: Any) -> None:
        batch = list(batch)
        self.batches.append(batch)
        for event in batch:
            self.data.rows[event.message.partition, event.message.offset] = event.value
            self.data.set_persisted_offset(event.message.tp, event.message.offset)

    async def on_changelog_event(self, event: Any) -> None:
        self.changelog_events.append(event)


class _SkippingTable(SkipsUndecodableChangelogRecords, _Table):
    pass


def test_stand_ins_are_not_stored_and_the_offset_moves_past_those_last() -> None:
    table = _SkippingTable()
    table.apply_changelog_batch([_event(0), _stand_in(1), _event(2), _stand_in(3), _event(0, 1)])
    assert len(table.batches) == 1
    assert [(e.message.partition, e.message.offset) for e in table.batches[0]] == [
        (0, 0),
        (0, 2),
        (1, 0),
    ]
    # Partition 0's last record was a stand-in: the store's offset covers it.
    assert table.data.offsets == {TP(TOPIC, 0): 3, TP(TOPIC, 1): 0}


def test_a_batch_of_stand_ins_only_moves_the_offset() -> None:
    table = _SkippingTable()
    table.apply_changelog_batch([_stand_in(7)])
    assert table.batches == []
    assert table.data.offsets == {TP(TOPIC, 0): 7}


def test_a_stand_in_before_the_last_record_leaves_the_store_s_offset_to_it() -> None:
    table = _SkippingTable()
    table.apply_changelog_batch([_stand_in(4), _event(5)])
    assert table.data.offsets == {TP(TOPIC, 0): 5}


def test_stand_ins_do_not_reach_changelog_event_callbacks() -> None:
    table = _SkippingTable()
    good = _event(1)
    asyncio.run(table.on_changelog_event(_stand_in(0)))
    asyncio.run(table.on_changelog_event(good))
    assert table.changelog_events == [good]


def _app(tmp_path: Path, policy: str) -> tuple[App, Any]:
    app = App("app", datadir=str(tmp_path), bad_record_policy=policy)
    table = app.Table("t", default=int, partitions=2)
    return app, table


@pytest.mark.parametrize("policy", ["skip", "dead-letter", "fail"])
def test_an_undecodable_changelog_record_becomes_a_stand_in_whatever_the_policy(
    tmp_path: Path, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    app, table = _app(tmp_path, policy)
    topic = table.changelog_topic
    found = changelog_table(app, TOPIC)
    assert found is table
    assert changelog_table(app, "app-other") is None
    global_table = app.GlobalTable("g", default=int, partitions=2)
    assert skips_undecodable(global_table) and skips_undecodable(table)

    caplog.set_level(logging.WARNING)
    event = asyncio.run(
        topic.decode(_message(5, b'"k"', b"{{ not json", partition=1), propagate=True)
    )
    assert isinstance(event, UndecodableChangelogRecord)
    assert event.message.offset == 5
    [line] = [r.getMessage() for r in caplog.records if "changelog record" in r.getMessage()]
    assert line.startswith(
        f"streamapp: changelog record of table t partition 1 at offset 5 ({TOPIC}[1]@5) "
        "cannot be used: value cannot be decoded: ValueDecodeError"
    ), line
    assert app.streamapp_bad_records.counts.as_json() == {TOPIC: {"skipped": 1, "dead_lettered": 0}}

    # The record at the store's own offset is fetched again as a replay starts there: it is
    # stood in for again (recovery drops it), without a second warning or count.
    caplog.clear()
    cast(Any, app.tables).recovery.active_offsets[TP(TOPIC, 1)] = 5
    again = asyncio.run(
        topic.decode(_message(5, b'"k"', b"{{ not json", partition=1), propagate=True)
    )
    assert isinstance(again, UndecodableChangelogRecord)
    assert not [r for r in caplog.records if "changelog record" in r.getMessage()]
    assert app.streamapp_bad_records.counts.as_json()[TOPIC]["skipped"] == 1


def test_a_record_that_decodes_is_an_ordinary_event(tmp_path: Path) -> None:
    _, table = _app(tmp_path, "skip")
    event = asyncio.run(table.changelog_topic.decode(_message(0, b'"k"', b"3"), propagate=True))
    assert not isinstance(event, UndecodableChangelogRecord)
    assert (event.key, event.value) == ("k", 3)
