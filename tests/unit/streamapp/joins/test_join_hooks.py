"""The windowed join's hooks without a broker: record ids, ``on_record``, the source message.

The wiring runs on a real `streamapp.App` (in-memory store, never started); its processor is
swapped for one over dicts, and the join's output is a callback, so nothing is sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from faust.exceptions import ValueDecodeError

from streamapp import App
from streamapp.bad_records import Stage
from streamapp.joins import (
    JoinResult,
    JoinWindow,
    Outcome,
    Side,
    Source,
    SourceRecord,
    UndecodableRecord,
    WindowedJoin,
)
from streamapp.joins.core import Entry, ExpiryIndex, JoinProcessor, held_entries
from streamapp.joins.window import JoinKind

WINDOW = JoinWindow(before_ms=0, after_ms=1_000, grace_ms=500)


def test_a_record_with_the_id_of_one_held_on_its_side_is_a_duplicate() -> None:
    proc = JoinProcessor(WINDOW, JoinKind.LEFT, {}, {}, index=ExpiryIndex(1))
    assert proc.process(Side.LEFT, 0, "k", Entry(0, 100, "a", id="x")).outcome is Outcome.ACCEPTED
    dup = proc.process(Side.LEFT, 0, "k", Entry(1, 150, "a again", id="x"))
    assert dup.outcome is Outcome.DUPLICATE
    assert [e.value for e in proc.stored(Side.LEFT, "k")] == ["a"]
    # Only the first one joins; a different id on the same key is its own record.
    joined = proc.process(Side.RIGHT, 0, "k", Entry(0, 200, "r", id="x"))
    assert [(p.left.value if p.left else None) for p in joined.pairs] == ["a"]
    assert proc.process(Side.LEFT, 0, "k", Entry(2, 190, "b", id="y")).pairs
    # The duplicate processed again after a crash is skipped, not counted twice.
    assert proc.process(Side.LEFT, 0, "k", Entry(1, 150, "a again", id="x")).outcome is (
        Outcome.SKIPPED
    )


def test_entries_keep_their_id_through_json_and_read_old_ones() -> None:
    assert Entry.from_json(Entry(3, 4, "v", True, "id-1").to_json()) == Entry(
        3, 4, "v", True, "id-1"
    )
    assert Entry(3, 4, "v").to_json() == [3, 4, "v", 0]
    assert Entry.from_json([3, 4, "v", 1]) == Entry(3, 4, "v", True)
    assert held_entries("k/a2V5", [[3, 4, "v", 0]]) == [Entry(3, 4, "v")]
    assert held_entries("~clock/0", 17) == []
    assert held_entries("k/a2V5", None) == []


def _message(topic: str, offset: int, key: str, value: bytes) -> Any:
    return SimpleNamespace(
        topic=topic, partition=0, offset=offset, key=key.encode(), value=value, timestamp=0.0
    )


def _wire(tmp_path: Path, policy: str) -> Any:
    app = App(
        "hooks-test",
        datadir=str(tmp_path),
        store="memory://",
        topic_partitions=1,
        bad_record_policy=policy,
    )
    json_topic: dict[str, Any] = {"key_type": str, "key_serializer": "raw"}
    left = app.topic("hooks-left", value_serializer="json", **json_topic)
    right = app.topic("hooks-right", value_serializer="json", **json_topic)
    results: list[JoinResult[Any, Any]] = []
    records: list[SourceRecord] = []

    async def on_record(record: SourceRecord) -> None:
        records.append(record)

    join = WindowedJoin(
        app,
        "hooks",
        left=Source(left, time_ms=lambda v: v["ts"], id=lambda v: v["id"]),
        right=Source(right, time_ms=lambda v: v["ts"]),
        window=WINDOW,
        kind="left",
        partitions=1,
        output=results.append,
        on_record=on_record,
    )
    join.processor = JoinProcessor(WINDOW, JoinKind.LEFT, {}, {}, index=ExpiryIndex(1))
    return SimpleNamespace(app=app, join=join, results=results, records=records)


@pytest.fixture
def wired(tmp_path: Path) -> Any:
    return _wire(tmp_path, "skip")


async def test_on_record_sees_every_record_with_its_outcome_and_source(wired: Any) -> None:
    join, results, records = wired.join, wired.results, wired.records
    first = _message("hooks-left", 0, "k", json.dumps({"id": "x", "ts": 100}).encode())
    await join.on_message(first)
    await join.on_message(
        _message("hooks-left", 1, "k", json.dumps({"id": "x", "ts": 101}).encode())
    )
    pair_source = _message("hooks-right", 0, "k", json.dumps({"ts": 200}).encode())
    await join.on_message(pair_source)
    assert [(r.side, r.outcome) for r in records] == [
        (Side.LEFT, Outcome.ACCEPTED),
        (Side.LEFT, Outcome.DUPLICATE),
        (Side.RIGHT, Outcome.ACCEPTED),
    ]
    assert records[0].key == "k"
    assert records[0].value == {"id": "x", "ts": 100}
    assert records[0].time_ms == 100
    assert records[0].message is first
    # One pair (the duplicate joined nothing), carrying the record that completed it.
    assert [(r.left, r.right) for r in results] == [({"id": "x", "ts": 100}, {"ts": 200})]
    assert results[0].message is pair_source


async def test_an_undecodable_record_is_reported_then_skipped_by_the_bad_record_policy(
    wired: Any,
) -> None:
    join, records = wired.join, wired.records
    await join.on_message(_message("hooks-left", 0, "k", b"\xff not json"))
    # A value that decodes but has no time is bad too.
    await join.on_message(_message("hooks-left", 1, "k", b'{"id": "x"}'))
    # A record with no key cannot be joined.
    await join.on_message(
        SimpleNamespace(**{**vars(_message("hooks-left", 2, "k", b"{}")), "key": None})
    )
    assert [(r.outcome, r.value, r.time_ms) for r in records] == [
        (Outcome.UNDECODABLE, None, None),
        (Outcome.UNDECODABLE, None, None),
        (Outcome.UNDECODABLE, None, None),
    ]
    errors = [r.error for r in records]
    assert all(isinstance(e, UndecodableRecord) for e in errors)
    assert [e.stage for e in errors if isinstance(e, UndecodableRecord)] == [
        Stage.VALUE_DECODE,
        Stage.PROCESSING,
        Stage.PROCESSING,
    ]
    # Each error names the record that caused it.
    assert "join hooks: record hooks-left[0]@0: value does not decode: ValueDecodeError" in str(
        errors[0]
    )
    assert "hooks-left[0]@1: no event time" in str(errors[1])
    assert "hooks-left[0]@2: no key" in str(errors[2])
    assert join.processor.stored(Side.LEFT, "aw==") == []
    # Skipped and counted, by where each went bad.
    counts = wired.app.streamapp_bad_records.counts
    assert counts.as_json() == {"hooks-left": {"skipped": 3, "dead_lettered": 0}}
    assert counts.by_stage == {
        ("skipped", "hooks-left", "value-decode"): 1,
        ("skipped", "hooks-left", "processing"): 2,
    }
    # Nothing was stored: a good record of the key is joined as if they never came.
    await join.on_message(
        _message("hooks-left", 3, "k", json.dumps({"id": "x", "ts": 100}).encode())
    )
    await join.on_message(_message("hooks-right", 0, "k", json.dumps({"ts": 200}).encode()))
    assert [(r.left, r.right) for r in wired.results] == [({"id": "x", "ts": 100}, {"ts": 200})]


async def test_under_fail_an_undecodable_record_raises_its_error_after_the_hook(
    tmp_path: Path,
) -> None:
    wired = _wire(tmp_path, "fail")
    with pytest.raises(UndecodableRecord) as raised:
        await wired.join.on_message(_message("hooks-left", 7, "k", b"\xff not json"))
    assert isinstance(raised.value.cause, ValueDecodeError)
    assert "hooks-left[0]@7" in str(raised.value)
    assert [r.outcome for r in wired.records] == [Outcome.UNDECODABLE]
    assert wired.join.processor.stored(Side.LEFT, "aw==") == []
