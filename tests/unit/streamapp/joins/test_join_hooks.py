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
from streamapp.joins import JoinRecord, JoinResult, JoinWindow, Outcome, Side, windowed_join
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


@pytest.fixture
def wired(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    app = App("hooks-test", datadir=str(tmp_path), store="memory://", topic_partitions=1)
    json_topic: dict[str, Any] = {"key_type": str, "key_serializer": "raw"}
    left = app.topic("hooks-left", value_serializer="json", **json_topic)
    right = app.topic("hooks-right", value_serializer="json", **json_topic)
    results: list[JoinResult[Any, Any]] = []
    records: list[JoinRecord] = []

    async def on_record(record: JoinRecord) -> None:
        records.append(record)

    join = windowed_join(
        app,
        "hooks",
        left=left,
        right=right,
        window=WINDOW,
        kind="left",
        partitions=1,
        output=results.append,
        left_time_ms=lambda v: v["ts"],
        right_time_ms=lambda v: v["ts"],
        left_id=lambda v: v["id"],
        on_record=on_record,
    )
    join.processor = JoinProcessor(WINDOW, JoinKind.LEFT, {}, {}, index=ExpiryIndex(1))
    return SimpleNamespace(join=join, results=results, records=records)


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


async def test_an_undecodable_record_is_reported_then_raised_for_the_bad_record_policy(
    wired: Any,
) -> None:
    join, records = wired.join, wired.records
    with pytest.raises(ValueDecodeError):
        await join.on_message(_message("hooks-left", 0, "k", b"\xff not json"))
    # A value that decodes but has no time is bad too.
    with pytest.raises(KeyError):
        await join.on_message(_message("hooks-left", 1, "k", b'{"id": "x"}'))
    assert [(r.outcome, r.value, r.time_ms) for r in records] == [
        (Outcome.UNDECODABLE, None, None),
        (Outcome.UNDECODABLE, None, None),
    ]
    assert isinstance(records[0].error, ValueDecodeError)
    assert join.processor.stored(Side.LEFT, "aw==") == []
