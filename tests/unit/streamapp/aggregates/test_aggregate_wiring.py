"""The windowed aggregate's agent without a broker: records read on arrival, bad ones never
folded, ``on_record``, ids, session and sliding windows through the wiring, batches.

The wiring runs on a real `streamapp.App` (in-memory store, never started); its processor is
rebuilt over a dict (through a write-back store over batches), its output a callback.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from streamapp import App
from streamapp.aggregates import (
    Outcome,
    SessionWindows,
    Source,
    SourceRecord,
    UndecodableRecord,
    WindowedAggregate,
    WindowResult,
    Windows,
)
from streamapp.batches import Batch
from streamapp.joins.write_back import WriteBack

TOPIC = "sales"


def _message(offset: int, key: str | None, value: Any) -> Any:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return SimpleNamespace(
        topic=TOPIC,
        partition=0,
        offset=offset,
        key=None if key is None else key.encode(),
        value=raw,
        timestamp=0.0,
        headers=[],
    )


def _wire(
    tmp_path: Path,
    windows: Any,
    *,
    policy: str = "skip",
    batched: bool = False,
    with_ids: bool = False,
) -> Any:
    app = App(
        "agg-test",
        datadir=str(tmp_path),
        store="memory://",
        topic_partitions=1,
        bad_record_policy=policy,
    )
    sales = app.topic(TOPIC, key_type=str, key_serializer="raw", value_serializer="json")
    results: list[WindowResult[Any]] = []
    records: list[SourceRecord] = []
    aggregate = WindowedAggregate(
        app,
        "per-store",
        source=Source(
            sales, time_ms=lambda s: s["ts"], id=(lambda s: s["id"]) if with_ids else None
        ),
        windows=windows,
        initial=lambda: 0,
        fold=lambda total, sale: total + sale["amount"],
        merge=(lambda a, b: a + b) if isinstance(windows, SessionWindows) else None,
        output=results.append,
        on_record=records.append,
        batch_records=100 if batched else None,
    )
    store: Any = {}
    if batched:
        store = aggregate.write_back = WriteBack(store)
    aggregate.processor = aggregate._processor(
        windows,
        store,
        lambda: 0,
        lambda total, sale: total + sale["amount"],
        (lambda a, b: a + b) if isinstance(windows, SessionWindows) else None,
        1,
    )
    return SimpleNamespace(app=app, aggregate=aggregate, results=results, records=records)


def _sale(offset: int, store: str | None, ts: int, amount: int, sale_id: str = "") -> Any:
    return _message(offset, store, {"ts": ts, "amount": amount, "id": sale_id or f"s{offset}"})


def _closed(results: list[WindowResult[Any]]) -> list[tuple[Any, int, int, Any]]:
    return [(r.key, r.start_ms, r.end_ms, r.value) for r in results]


async def test_session_totals_through_the_agent_and_bad_records_never_folded(
    tmp_path: Path,
) -> None:
    wired = _wire(tmp_path, Windows.session(100, grace_ms=50))
    agg = wired.aggregate
    await agg.on_message(_sale(0, "s1", 1_000, 5))
    await agg.on_message(_message(1, "s1", b"\xff not json"))
    await agg.on_message(_message(2, "s1", {"amount": 1}))  # no ts
    await agg.on_message(_sale(3, None, 1_000, 7))  # no key
    await agg.on_message(_sale(4, "s1", 1_080, 3))
    await agg.on_message(_sale(5, "s2", 2_000, 1))  # closes s1's session
    assert _closed(wired.results) == [("s1", 1_000, 1_081, 8)]
    assert wired.results[0].message.offset == 5  # emitted on behalf of the record closing it
    assert [r.outcome for r in wired.records] == [
        Outcome.ACCEPTED,
        Outcome.UNDECODABLE,
        Outcome.UNDECODABLE,
        Outcome.UNDECODABLE,
        Outcome.ACCEPTED,
        Outcome.ACCEPTED,
    ]
    assert {r.source for r in wired.records} == {"source"}
    errors = [r.error for r in wired.records if r.error is not None]
    assert ["sales[0]@1" in str(errors[0]), "sales[0]@2" in str(errors[1])] == [True, True]
    assert "sales[0]@3: no key" in str(errors[2])
    counts = wired.app.streamapp_bad_records.counts
    assert counts.by_stage == {
        ("skipped", "sales", "value-decode"): 1,
        ("skipped", "sales", "processing"): 2,
    }
    assert agg.current("s2") == {2_000: 1}


async def test_under_fail_a_bad_record_raises_naming_itself(tmp_path: Path) -> None:
    wired = _wire(tmp_path, Windows.tumbling(1_000), policy="fail")
    with pytest.raises(UndecodableRecord, match=r"aggregate per-store: record sales\[0\]@9"):
        await wired.aggregate.on_message(_message(9, "s1", b"\xff"))
    assert wired.aggregate.current("s1") == {}


async def test_a_record_with_an_id_a_window_holds_is_a_duplicate(tmp_path: Path) -> None:
    wired = _wire(tmp_path, Windows.tumbling(1_000), with_ids=True)
    agg = wired.aggregate
    await agg.on_message(_sale(0, "s1", 100, 5, "sale-1"))
    await agg.on_message(_sale(1, "s1", 200, 5, "sale-1"))  # delivered twice
    await agg.on_message(_sale(2, "s1", 300, 2, "sale-2"))
    await agg.on_message(_sale(3, "s1", 5_000, 0, "sale-3"))
    assert _closed(wired.results) == [("s1", 0, 1_000, 7)]
    assert [r.outcome for r in wired.records] == [
        Outcome.ACCEPTED,
        Outcome.DUPLICATE,
        Outcome.ACCEPTED,
        Outcome.ACCEPTED,
    ]


async def test_sliding_windows_restore_kept_records_through_the_source_codecs(
    tmp_path: Path,
) -> None:
    wired = _wire(tmp_path, Windows.sliding(100))
    agg = wired.aggregate
    await agg.on_message(_sale(0, "s1", 1_000, 5))
    await agg.on_message(_sale(1, "s1", 1_050, 3))
    await agg.on_message(_sale(2, "s1", 5_000, 1))
    assert _closed(wired.results) == [("s1", 900, 1_001, 5), ("s1", 950, 1_051, 8)]


@pytest.mark.parametrize(
    "windows",
    [Windows.tumbling(100, grace_ms=30), Windows.session(40, grace_ms=30), Windows.sliding(60)],
    ids=["tumbling", "session", "sliding"],
)
async def test_over_batches_the_same_as_record_by_record(tmp_path: Path, windows: Any) -> None:
    sales = [(i, f"s{i % 3}", 1_000 + (i * 37) % 200 + i * 10, i % 5) for i in range(40)]
    messages = [_sale(*sale) for sale in sales]
    messages.insert(17, _message(99, "s1", b"\xff"))
    one_by_one = _wire(tmp_path / "one", windows)
    for message in messages:
        await one_by_one.aggregate.on_message(message)
    batched = _wire(tmp_path / "batched", windows, batched=True)
    for start in range(0, len(messages), 7):
        cut = messages[start : start + 7]
        batch = Batch(TP(TOPIC, 0), [SimpleNamespace(message=m) for m in cut])
        await batched.aggregate.on_batch(batch)  # type: ignore[arg-type]
    assert one_by_one.results  # windows did close
    assert sorted(_closed(batched.results)) == sorted(_closed(one_by_one.results))
    assert [r.outcome for r in batched.records] == [r.outcome for r in one_by_one.records]


def test_merge_is_for_sessions_and_required_there(tmp_path: Path) -> None:
    app = App("agg-refuse", datadir=str(tmp_path), store="memory://", topic_partitions=1)
    sales = app.topic(TOPIC)
    with pytest.raises(ValueError, match="need merge"):
        WindowedAggregate(
            app, "a", source=sales, windows=Windows.session(10), initial=int, fold=max
        )
    with pytest.raises(ValueError, match="session windows only"):
        WindowedAggregate(
            app,
            "b",
            source=sales,
            windows=Windows.tumbling(10),
            initial=int,
            fold=max,
            merge=max,
        )
    counted = WindowedAggregate.count(app, "c", source=sales, windows=Windows.session(10))
    assert counted.processor.merge(2, 3) == 5  # type: ignore[union-attr]
