"""``GET /metrics`` scraped from two live workers on a real broker.

Each worker's Prometheus text must parse, carry its client id on every sample, and say what its
own ``/streamapp/assignment`` view says: rebalances, records replayed, replica lag partitions,
bad records skipped; and the records processed from the source topic add up to what was produced.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from streamapp.testing.kafka_io import create_topic
from streamapp.testing.worker import WorkerProcess
from tests.integration.apps.bad_records import PARTITIONS

from .workers import wait_for_workers

APP = "tests.integration.apps.bad_records:app"
APP_ID = "it-metrics"
TOPIC = f"{APP_ID}-events"
CHANGELOG = f"{APP_ID}-sums-changelog"
GOOD = 40
#: Values that do not decode as JSON: skipped under the default policy, reason value-decode.
BAD = [b"{not json", b"\xff\xfe"]


async def _produce(bootstrap: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(GOOD):
            await producer.send(
                TOPIC, key=f"k{i % 8}".encode(), value=json.dumps({"n": 1}).encode()
            )
        for value in BAD:
            await producer.send(TOPIC, key=b"bad", value=value)
        await producer.flush()
    finally:
        await producer.stop()


@pytest.fixture(scope="module")
def workers(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, WorkerProcess]]:
    env = pytest.MonkeyPatch()
    env.setenv("BAD_RECORDS_APP_ID", APP_ID)  # read by the worker subprocesses' app module
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    root = tmp_path_factory.mktemp("metrics")
    started: dict[str, WorkerProcess] = {}
    try:
        for name in ("w1", "w2"):
            worker = WorkerProcess(APP, kafka_bootstrap, root / name, "--client-id", name)
            started[name] = worker.start()
        yield started
    finally:
        for worker in started.values():
            worker.stop()
        env.undo()


def _scrape(worker: WorkerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    url = f"http://127.0.0.1:{worker.web_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _view(worker: WorkerProcess) -> dict[str, Any]:
    view: dict[str, Any] = worker.get_json("/streamapp/assignment")
    return view


def test_metrics_say_what_the_views_say(
    kafka_bootstrap: str, workers: dict[str, WorkerProcess]
) -> None:
    def settled() -> bool:
        views = [_view(w) for w in workers.values()]
        held = sorted(p for v in views for p in v["active"].get(TOPIC, []))
        return held == list(range(PARTITIONS)) and all(
            not v["followup_pending"]
            and v["history"]
            and v["history"][-1]["plan_generation"] == v["plan_generation"]
            for v in views
        )

    wait_for_workers(workers, "both workers processing", settled, timeout=240)
    asyncio.run(_produce(kafka_bootstrap))

    def processed_all() -> bool:
        total = 0.0
        for name, worker in workers.items():
            for (metric, labels), value in _scrape(worker).items():
                if metric == "streamapp_records_processed_total" and dict(labels) == {
                    "client_id": name,
                    "topic": TOPIC,
                }:
                    total += value
        # At least once: a record may be processed twice, never missed.
        return total >= GOOD + len(BAD)

    wait_for_workers(workers, "every record processed", processed_all, timeout=120)
    scraped: dict[str, Any] = {}

    def metrics_match_views() -> bool:
        # Rebalances can come between two reads: read the view on both sides of the scrape.
        for name, worker in workers.items():
            before = _view(worker)
            samples = _scrape(worker)
            after = _view(worker)
            if (
                before["rebalances"] != after["rebalances"]
                or before["recovery"] != after["recovery"]
            ):
                return False
            scraped[name] = (samples, after)
        return True

    wait_for_workers(workers, "a scrape between two equal views", metrics_match_views, timeout=60)
    skipped_total = 0.0
    for name, (samples, view) in scraped.items():
        client = ("client_id", name)
        assert all(dict(labels).get("client_id") == name for _m, labels in samples), samples
        assert samples[("streamapp_rebalances_total", (client,))] == view["rebalances"]
        recovery = view["recovery"]
        assert (
            samples[("streamapp_records_replayed_total", (client,))]
            == recovery["records_replayed_total"]
        )
        resume = recovery["last_rebalance"]["seconds_to_resume"]
        assert samples[("streamapp_seconds_to_resume", (client,))] == pytest.approx(resume)
        lag_partitions = {
            (dict(labels)["topic"], int(dict(labels)["partition"]))
            for metric, labels in samples
            if metric == "streamapp_replica_lag_records"
        }
        replicas = {
            (topic, p)
            for part in (view["standby"], view["warmup"])
            for topic, ps in part.items()
            for p in ps
        }
        # Every lag the worker measured is of one of its replicas (standbys: one per partition).
        assert lag_partitions <= replicas
        assert {(t, int(p)) for t, ps in view["replica_lag"].items() for p in ps} == lag_partitions
        for (metric, labels), value in samples.items():
            if metric == "streamapp_records_skipped_total":
                assert dict(labels) == {"client_id": name, "topic": TOPIC, "reason": "value-decode"}
                assert value == view["bad_records"][TOPIC]["skipped"]
                skipped_total += value
    assert skipped_total >= len(BAD)
