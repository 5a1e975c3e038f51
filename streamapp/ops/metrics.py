"""``GET /metrics``: a worker's numbers in Prometheus' text format, through `prometheus_client`.

Read at scrape time from what the worker keeps anyway (the replica runtime's recovery meter and
lag, the bad-record counts, Faust's monitor), so there is one count of each thing and
`/streamapp/assignment` and `/metrics` cannot disagree. Every sample carries the worker's
``client_id``. Names after Faust's Prometheus sensor (``faust_...``: ``_total`` counters, one
label per dimension), with streamapp's prefix:

- ``streamapp_rebalances_total``: assignments this worker received;
- ``streamapp_records_replayed_total``: changelog records its active partitions' recovery
  replayed, over all rebalances;
- ``streamapp_seconds_to_resume``: of the last rebalance, from the partitions being revoked to
  every active partition processing again (absent before the first one resumed);
- ``streamapp_replica_lag_records{topic,partition}``: changelog records each standby or
  warmup replica is behind its changelog's end, as last measured (every second);
- ``streamapp_records_processed_total{topic}``: records the app's streams received from each
  topic (Faust's monitor's ``messages_received_by_topic``);
- ``streamapp_records_skipped_total{topic,reason}``: bad records skipped, by where they went
  bad (``key-decode``, ``value-decode``, ``processing``);
- ``streamapp_dead_letters_total{topic,reason}``: bad records sent to the dead-letter topic.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streamapp.bad_records import bad_records_of


class WorkerCollector(Collector):
    """Collects one worker's metrics from its app, each time it is scraped."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        app = self.app
        client = str(app.streamapp_settings.client_id or "")
        runtime = getattr(app, "streamapp_runtime", None)

        rebalances = CounterMetricFamily(
            "streamapp_rebalances", "Assignments this worker received", labels=["client_id"]
        )
        replayed = CounterMetricFamily(
            "streamapp_records_replayed",
            "Changelog records replayed by the recovery of active partitions",
            labels=["client_id"],
        )
        resume = GaugeMetricFamily(
            "streamapp_seconds_to_resume",
            "Last rebalance: seconds from revocation to every active partition processing",
            labels=["client_id"],
        )
        lag = GaugeMetricFamily(
            "streamapp_replica_lag_records",
            "Changelog records a standby or warmup replica is behind its changelog's end",
            labels=["client_id", "topic", "partition"],
        )
        if runtime is not None:
            meter = runtime.meter
            rebalances.add_metric([client], meter.rebalances)
            replayed.add_metric([client], meter.records_replayed_total)
            if meter.last_seconds_to_resume is not None:
                resume.add_metric([client], meter.last_seconds_to_resume)
            for tp, records in sorted(runtime.replica_lag.items()):
                lag.add_metric([client, tp.topic, str(tp.partition)], records)
        yield from (rebalances, replayed, resume, lag)

        processed = CounterMetricFamily(
            "streamapp_records_processed",
            "Records the app's streams received, per topic",
            labels=["client_id", "topic"],
        )
        for topic, count in sorted(app.monitor.messages_received_by_topic.items()):
            processed.add_metric([client, str(topic)], count)
        yield processed

        skipped = CounterMetricFamily(
            "streamapp_records_skipped",
            "Bad records skipped, by where they went bad",
            labels=["client_id", "topic", "reason"],
        )
        dead = CounterMetricFamily(
            "streamapp_dead_letters",
            "Bad records sent to the dead-letter topic, by where they went bad",
            labels=["client_id", "topic", "reason"],
        )
        handler = bad_records_of(app)
        if handler is not None:
            for (what, topic, reason), count in sorted(handler.counts.by_stage.items()):
                family = skipped if what == "skipped" else dead
                family.add_metric([client, topic, reason], count)
        yield from (skipped, dead)


def registry_for(app: Any) -> CollectorRegistry:
    """The app's own registry: not the process-wide default, which would mix apps and tests."""
    registry = getattr(app, "streamapp_metrics", None)
    if registry is None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(WorkerCollector(app))
        app.streamapp_metrics = registry
    return registry


def render(app: Any) -> bytes:
    """The app's metrics in Prometheus' text format."""
    return generate_latest(registry_for(app))


__all__ = ["CONTENT_TYPE_LATEST", "WorkerCollector", "registry_for", "render"]
