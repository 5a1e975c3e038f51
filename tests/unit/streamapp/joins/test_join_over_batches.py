"""The windowed join's agent over batches, without a broker: one expiry sweep and one flush per
batch, and the same output as record by record.

The wiring runs on a real `streamapp.App` (in-memory store, never started); its processor is
one over dicts (through write-back stores, as over batches), its output a callback, and the
producer flush before expired records are forgotten is counted instead of sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from streamapp import App
from streamapp.batches import Batch
from streamapp.joins import JoinResult, JoinWindow, Source, WindowedJoin
from streamapp.joins import _io as join_io
from streamapp.joins.core import Expiry, ExpiryIndex, JoinProcessor
from streamapp.joins.window import JoinKind
from streamapp.joins.write_back import WriteBack

WINDOW = JoinWindow(before_ms=0, after_ms=100, grace_ms=0)


class CountingProcessor(JoinProcessor):
    """Counts the sweeps the wiring plans, and those that found something to expire."""

    planned = 0
    found = 0

    def plan_expiry(self, partition: int) -> Expiry:
        expiry = super().plan_expiry(partition)
        self.planned += 1
        self.found += not expiry.empty
        return expiry


def _message(topic: str, offset: int, key: str, ts: int) -> Any:
    value = json.dumps({"id": f"{topic.rsplit('-', 1)[1]}{offset}", "ts": ts}).encode()
    return SimpleNamespace(
        topic=topic, partition=0, offset=offset, key=key.encode(), value=value, timestamp=0.0
    )


def _wire(tmp_path: Path, name: str, batched: bool) -> Any:
    app = App(name, datadir=str(tmp_path / name), store="memory://", topic_partitions=1)
    json_topic: dict[str, Any] = {"key_type": str, "key_serializer": "raw"}
    left = app.topic(f"{name}-left", value_serializer="json", **json_topic)
    right = app.topic(f"{name}-right", value_serializer="json", **json_topic)
    results: list[JoinResult[Any, Any]] = []
    join = WindowedJoin(
        app,
        name,
        left=Source(left, time_ms=lambda v: v["ts"], id=lambda v: v["id"]),
        right=Source(right, time_ms=lambda v: v["ts"]),
        window=WINDOW,
        kind="left",
        partitions=1,
        output=results.append,
        batch_records=100 if batched else None,
    )
    stores: tuple[Any, Any] = (WriteBack({}), WriteBack({})) if batched else ({}, {})
    join.processor = CountingProcessor(WINDOW, JoinKind.LEFT, *stores, index=ExpiryIndex(10))
    return SimpleNamespace(join=join, results=results, left=f"{name}-left", right=f"{name}-right")


def _traffic(left: str, right: str) -> list[tuple[str, int, str, int]]:
    """Impressions (right) each 50 ms, a click (left) after every other one: clicks on odd
    keys match, the rest expire unmatched as the impressions' clock moves on."""
    out: list[tuple[str, int, str, int]] = []
    for i in range(40):
        out.append((right, i, f"k{i}", i * 50))
        if i % 2 == 0:
            out.append((left, i // 2, f"k{i + 1}" if i % 4 == 0 else f"x{i}", i * 50 + 60))
    return out


async def test_a_batch_is_swept_and_flushed_once_and_emits_what_records_one_by_one_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushes = 0

    async def counted_flush(app: Any) -> None:
        nonlocal flushes
        flushes += 1

    monkeypatch.setattr(join_io, "flush_before_forgetting", counted_flush)
    one_by_one = _wire(tmp_path, "one-by-one", batched=False)
    messages = [_message(*m) for m in _traffic(one_by_one.left, one_by_one.right)]
    for message in messages:
        await one_by_one.join.on_message(message)
    by_record_flushes, flushes = flushes, 0

    batched = _wire(tmp_path, "batched", batched=True)
    messages = [_message(*m) for m in _traffic(batched.left, batched.right)]
    cuts = [messages[i : i + 15] for i in range(0, len(messages), 15)]
    for cut in cuts:
        batch = Batch(TP(batched.left, 0), [SimpleNamespace(message=m) for m in cut])
        await batched.join.on_batch(batch)  # type: ignore[arg-type]

    def emitted(results: list[JoinResult[Any, Any]]) -> list[tuple[Any, Any]]:
        return sorted((json.dumps(r.left), json.dumps(r.right)) for r in results)

    assert emitted(batched.results) == emitted(one_by_one.results)
    assert any(r.right is None for r in batched.results)  # unmatched clicks expired
    # Record by record: a sweep planned per record, and one flush per sweep that found some.
    assert one_by_one.join.processor.planned == len(messages)
    assert by_record_flushes == one_by_one.join.processor.found > len(cuts)
    # Over batches: one sweep, and at most one flush, per batch.
    assert batched.join.processor.planned == len(cuts)
    assert flushes == batched.join.processor.found <= len(cuts)
