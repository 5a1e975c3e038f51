"""`/metrics`: the worker's counts in Prometheus' text format, read from what it keeps anyway."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

from faust.types import TP
from prometheus_client.parser import text_string_to_metric_families

from standby.recovery_meter import RecoveryMeter
from streamapp.bad_records import BadRecordCounts, BadRecords, Stage
from streamapp.ops import metrics
from streamapp.settings import StreamappSettings


def _app() -> Any:
    meter = RecoveryMeter()
    meter.on_revoked(10.0)
    meter.on_assigned(10.5, {TP("app-t-changelog", 0): 100})
    meter.on_resumed(12.0, {TP("app-t-changelog", 0): 130})
    runtime = SimpleNamespace(meter=meter, replica_lag={TP("app-t-changelog", 3): 7})
    counts = BadRecordCounts()
    counts.skipped("orders", Stage.VALUE_DECODE)
    counts.skipped("orders", Stage.VALUE_DECODE)
    counts.dead_lettered("orders", Stage.PROCESSING)
    handler = BadRecords.__new__(BadRecords)
    handler.counts = counts
    return SimpleNamespace(
        streamapp_settings=StreamappSettings(client_id="worker-1"),
        streamapp_runtime=runtime,
        streamapp_bad_records=handler,
        monitor=SimpleNamespace(messages_received_by_topic=Counter({"orders": 42})),
    )


def _samples(app: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render(app).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_the_contract_names_with_client_id_on_every_sample() -> None:
    samples = _samples(_app())
    w = ("client_id", "worker-1")
    assert samples[("streamapp_rebalances_total", (w,))] == 1
    assert samples[("streamapp_records_replayed_total", (w,))] == 30
    assert samples[("streamapp_seconds_to_resume", (w,))] == 2.0
    lag = ("streamapp_replica_lag_records", (w, ("partition", "3"), ("topic", "app-t-changelog")))
    assert samples[lag] == 7
    assert samples[("streamapp_records_processed_total", (w, ("topic", "orders")))] == 42
    skipped = (
        "streamapp_records_skipped_total",
        (w, ("reason", "value-decode"), ("topic", "orders")),
    )
    assert samples[skipped] == 2
    dead = ("streamapp_dead_letters_total", (w, ("reason", "processing"), ("topic", "orders")))
    assert samples[dead] == 1
    assert all(dict(labels).get("client_id") == "worker-1" for _name, labels in samples)


def test_before_the_first_rebalance_there_is_no_seconds_to_resume() -> None:
    app = _app()
    app.streamapp_runtime.meter = RecoveryMeter()
    names = {name for name, _labels in _samples(app)}
    assert "streamapp_seconds_to_resume" not in names
    assert "streamapp_rebalances_total" in names


def test_each_app_has_its_own_registry() -> None:
    first, second = _app(), _app()
    second.streamapp_settings = StreamappSettings(client_id="worker-2")
    assert b'client_id="worker-1"' in metrics.render(first)
    assert b'client_id="worker-1"' not in metrics.render(second)
