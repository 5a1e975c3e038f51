"""The stream-table join's agent without a broker: records of both topics read on arrival, a bad
table record never reaching the table, ``on_record``, the temporal join, batches.

The wiring runs on a real `streamapp.App` (in-memory store, never started); its output is a
callback, so nothing is sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from faust.exceptions import ValueDecodeError
from faust.types import TP

from streamapp import App
from streamapp.batches import Batch
from streamapp.joins import (
    Enrichment,
    Outcome,
    Source,
    SourceRecord,
    StreamTableJoin,
    UndecodableRecord,
)
from streamapp.joins.temporal import TableHistory

STREAM, TABLE = "shipments", "customers"


def _message(topic: str, offset: int, key: str | None, value: Any, ts: float = 0.0) -> Any:
    raw = value if isinstance(value, bytes) or value is None else json.dumps(value).encode()
    return SimpleNamespace(
        topic=topic,
        partition=0,
        offset=offset,
        key=None if key is None else key.encode(),
        value=raw,
        timestamp=ts,
        headers=[],
    )


def _wire(tmp_path: Path, policy: str = "skip", **options: Any) -> Any:
    app = App(
        "st-test",
        datadir=str(tmp_path),
        store="memory://",
        topic_partitions=1,
        bad_record_policy=policy,
    )
    json_topic: dict[str, Any] = {"key_type": str, "key_serializer": "raw"}
    shipments = app.topic(STREAM, value_serializer="json", **json_topic)
    customers = app.topic(TABLE, value_serializer="json", **json_topic)
    results: list[Enrichment] = []
    records: list[SourceRecord] = []
    join = StreamTableJoin(
        app,
        "enrich",
        stream=shipments,
        table=customers,
        kind="left",
        output=results.append,
        on_record=records.append,
        **options,
    )
    store: dict[str, Any] = {}
    join.table = store  # a dict for the table: nothing started
    join.updates.store = store
    if join.history is not None:
        join.history = TableHistory("left", store, join.history.history_ms)
    return SimpleNamespace(app=app, join=join, results=results, records=records, store=store)


def _labels(results: list[Enrichment]) -> list[tuple[str, Any]]:
    return [(r.value["id"], r.table_value["name"] if r.table_value else None) for r in results]


async def test_an_undecodable_table_record_is_skipped_and_leaves_the_key_as_it_was(
    tmp_path: Path,
) -> None:
    wired = _wire(tmp_path)
    join = wired.join
    await join.on_message(_message(TABLE, 0, "c1", {"name": "Ada"}))
    await join.on_message(_message(TABLE, 1, "c1", b"\xff not json"))
    await join.on_message(_message(STREAM, 0, "c1", {"id": "s1"}))
    # The shipment meets the last good value; nothing blamed it.
    assert _labels(wired.results) == [("s1", "Ada")]
    assert [(r.source, r.outcome) for r in wired.records] == [
        ("table", Outcome.ACCEPTED),
        ("table", Outcome.UNDECODABLE),
        ("stream", Outcome.ACCEPTED),
    ]
    error = wired.records[1].error
    assert isinstance(error, UndecodableRecord)
    assert "join enrich: record customers[0]@1: value does not decode: ValueDecodeError" in str(
        error
    )
    counts = wired.app.streamapp_bad_records.counts
    assert counts.by_stage == {("skipped", "customers", "value-decode"): 1}


async def test_an_undecodable_stream_record_is_skipped_on_its_own(tmp_path: Path) -> None:
    wired = _wire(tmp_path)
    await wired.join.on_message(_message(TABLE, 0, "c1", {"name": "Ada"}))
    await wired.join.on_message(_message(STREAM, 0, "c1", b"{not json"))
    await wired.join.on_message(_message(STREAM, 1, None, {"id": "no key"}))
    await wired.join.on_message(_message(STREAM, 2, "c1", {"id": "s2"}))
    assert _labels(wired.results) == [("s2", "Ada")]
    assert wired.app.streamapp_bad_records.counts.as_json() == {
        "shipments": {"skipped": 2, "dead_lettered": 0}
    }


async def test_under_fail_a_bad_table_record_raises_naming_itself(tmp_path: Path) -> None:
    wired = _wire(tmp_path, "fail")
    await wired.join.on_message(_message(TABLE, 0, "c1", {"name": "Ada"}))
    with pytest.raises(UndecodableRecord) as raised:
        await wired.join.on_message(_message(TABLE, 5, "c1", b"\xff"))
    assert isinstance(raised.value.cause, ValueDecodeError)
    assert "customers[0]@5" in str(raised.value)
    assert list(wired.store.values()) == [wired.store["k/YzE="]]  # Ada's value, untouched
    await wired.join.on_message(_message(STREAM, 0, "c1", {"id": "s1"}))
    assert _labels(wired.results) == [("s1", "Ada")]


async def test_a_deletion_is_not_decoded_and_unmatched_records_say_so(tmp_path: Path) -> None:
    wired = _wire(tmp_path)
    await wired.join.on_message(_message(TABLE, 0, "c1", {"name": "Ada"}))
    await wired.join.on_message(_message(TABLE, 1, "c1", None))
    await wired.join.on_message(_message(STREAM, 0, "c1", {"id": "s1"}))
    assert _labels(wired.results) == [("s1", None)]
    assert wired.records[-1].outcome is Outcome.UNMATCHED
    assert wired.app.streamapp_bad_records.counts.as_json() == {}


async def test_the_temporal_join_meets_the_value_valid_at_each_records_time(
    tmp_path: Path,
) -> None:
    app = App("st-temporal", datadir=str(tmp_path), store="memory://", topic_partitions=1)
    json_topic: dict[str, Any] = {"key_type": str, "key_serializer": "raw"}
    shipments = app.topic(STREAM, value_serializer="json", **json_topic)
    customers = app.topic(TABLE, value_serializer="json", **json_topic)
    results: list[Enrichment] = []
    records: list[SourceRecord] = []
    join = StreamTableJoin(
        app,
        "asof",
        stream=Source(shipments, time_ms=lambda s: s["ts"]),
        table=Source(customers, time_ms=lambda c: c["ts"]),
        kind="inner",
        history_ms=1_000,
        output=results.append,
        on_record=records.append,
    )
    store: dict[str, Any] = {}
    join.table = store
    assert join.history is not None
    join.history = TableHistory("inner", store, 1_000)

    async def table(offset: int, ts: int, name: str) -> None:
        await join.on_message(_message(TABLE, offset, "c1", {"name": name, "ts": ts}))

    async def stream(offset: int, ts: int) -> None:
        await join.on_message(_message(STREAM, offset, "c1", {"id": f"s{ts}", "ts": ts}))

    await table(0, 100, "Ada")
    await table(1, 500, "Ada L.")
    for offset, ts in enumerate([99, 100, 499, 1_500]):
        await stream(offset, ts)
    await table(2, 2_000, "Ada K.")
    await stream(4, 2_500)
    await stream(5, 999)
    assert [(r.value["id"], r.table_value["name"], r.time_ms) for r in results] == [
        ("s100", "Ada", 100),
        ("s499", "Ada", 499),
        ("s1500", "Ada L.", 1_500),
        ("s2500", "Ada K.", 2_500),
    ]
    stream_outcomes = [r.outcome for r in records if r.source == "stream"]
    assert stream_outcomes == [
        Outcome.UNMATCHED,  # before the first version: an inner join drops it
        Outcome.ACCEPTED,
        Outcome.ACCEPTED,
        Outcome.ACCEPTED,
        Outcome.ACCEPTED,
        Outcome.LATE,  # 999 < clock 2000 - history 1000
    ]
    assert join.history.late_count(0) == 1


async def test_over_batches_the_same_as_record_by_record(tmp_path: Path) -> None:
    traffic = [
        (TABLE, 0, "c1", {"name": "Ada"}),
        (STREAM, 0, "c1", {"id": "s1"}),
        (TABLE, 1, "c1", b"\xff"),
        (TABLE, 2, "c2", {"name": "Bob"}),
        (STREAM, 1, "c2", {"id": "s2"}),
        (STREAM, 2, "c1", b"\xff"),
        (TABLE, 3, "c1", {"name": "Ada L."}),
        (STREAM, 3, "c1", {"id": "s3"}),
    ]
    one_by_one = _wire(tmp_path / "one")
    for m in traffic:
        await one_by_one.join.on_message(_message(*m))
    batched = _wire(tmp_path / "batched", batch_records=100)
    messages = [_message(*m) for m in traffic]
    for cut in (messages[:3], messages[3:]):
        batch = Batch(TP(cut[0].topic, 0), [SimpleNamespace(message=m) for m in cut])
        await batched.join.on_batch(batch)  # type: ignore[arg-type]
    assert (
        _labels(batched.results)
        == _labels(one_by_one.results)
        == [
            ("s1", "Ada"),
            ("s2", "Bob"),
            ("s3", "Ada L."),
        ]
    )


def test_ids_and_a_dead_letter_topic_without_history_are_refused(tmp_path: Path) -> None:
    app = App("st-refuse", datadir=str(tmp_path), store="memory://", topic_partitions=1)
    shipments, customers = app.topic(STREAM), app.topic(TABLE)
    with pytest.raises(ValueError, match="no duplicates to find"):
        StreamTableJoin(
            app, "a", stream=Source(shipments, id=lambda v: v), table=customers, output=print
        )
    with pytest.raises(ValueError, match="only a temporal join"):
        StreamTableJoin(
            app, "b", stream=shipments, table=customers, output=print, dead_letter_topic="late"
        )
    with pytest.raises(ValueError, match="co-partitioned"):
        StreamTableJoin(
            app,
            "c",
            stream=shipments,
            table=customers,
            output=print,
            history_ms=10,
            global_table=True,
        )
    with pytest.raises(TypeError, match="table"):
        StreamTableJoin(app, "d", stream=shipments, output=print)
