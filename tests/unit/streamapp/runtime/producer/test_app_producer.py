"""The app's producer (`streamapp.runtime.producer.app_producer.AppProducer`): the settings of
its aiokafka producers, its transactions (its own, per instance), what it does when a
transaction is fenced or a send fails, its partitioner and its flush and stop.

Its aiokafka producers are built but never started (no broker), or are stand-ins that record
the calls Faust's transaction manager makes; the broker's side (sends in transactions, commits,
fencing by another worker) is tests/integration/test_eos_sends.py's and
test_exactly_once_kills.py's, topic creation tests/integration/test_app_producer.py's.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import aiokafka
import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, ProducerFenced
from aiokafka.protocol.metadata import MetadataResponse_v1
from faust.auth import SASLCredentials
from faust.exceptions import NotReady, ProducerSendError
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from streamapp import App
from streamapp.runtime.producer import topic_creation
from streamapp.runtime.producer.app_producer import AppProducer
from streamapp.runtime.producer.client import WorkerProducer
from streamapp.sending.threaded_producer import ThreadedProducer

SETTINGS: dict[str, Any] = {
    "broker": "kafka://127.0.0.1:9",
    "broker_client_id": "billing",
    "producer_linger": 0.02,
    "producer_acks": 1,
    "producer_max_batch_size": 4096,
    "producer_max_request_size": 500_000,
    "producer_compression_type": "gzip",
    "producer_request_timeout": 33.0,
    "producer_metadata_max_age_ms": 12_345,
    "producer_connections_max_idle_ms": 67_890,
}


def _producer(app: Any) -> AppProducer:
    producer = app.producer
    assert isinstance(producer, AppProducer)
    return producer


def _fausts_options(app: Any, transactional_id: str | None = None) -> dict[str, Any]:
    """The keyword arguments Faust's aiokafka driver builds its aiokafka producer with, for the
    same app (its producer's private methods, called here to compare)."""
    faust_producer: Any = faust_aiokafka.Producer(app.transport)
    return {
        **faust_producer._settings_default(),
        **faust_producer._settings_auth(),
        **faust_producer._settings_extra(),
        "transactional_id": transactional_id,
    }


def _comparable(options: dict[str, Any]) -> dict[str, Any]:
    """Options with the partitioner (an instance of each producer's own) as its class."""
    return {**options, "partitioner": type(options["partitioner"])}


@pytest.mark.parametrize(
    ("guarantee", "credentials"),
    [
        ("at_least_once", None),
        ("exactly_once", None),
        ("at_least_once", SASLCredentials(username="u", password="p", mechanism="PLAIN")),
    ],
)
async def test_its_aiokafka_producers_have_the_settings_fausts_driver_gives(
    tmp_path: Path, guarantee: str, credentials: Any
) -> None:
    app = App(
        "producer-settings",
        datadir=str(tmp_path),
        processing_guarantee=guarantee,
        broker_credentials=credentials,
        **SETTINGS,
    )
    app.in_worker = True  # Faust is in a transaction under exactly_once in a worker only
    producer = _producer(app)
    for tid in (None, "producer-settings-0-3"):
        assert _comparable(producer.client_options(tid)) == _comparable(_fausts_options(app, tid))
    options = producer.client_options("t-1")
    assert options["client_id"] == "billing" and options["linger_ms"] == 20
    if guarantee == "exactly_once":
        assert (options["acks"], options["enable_idempotence"]) == ("all", True)
    if credentials is not None:
        assert (
            options["sasl_plain_username"] == "u"
            and options["security_protocol"] == "SASL_PLAINTEXT"
        )
    # A transactional producer is idempotent: aiokafka refuses one with acks=1.
    built = producer.new_client("t-1" if guarantee == "exactly_once" else None)
    try:
        assert isinstance(built, WorkerProducer)
        assert built.client._client_id == "billing"
    finally:
        await built.stop()


async def test_the_worker_s_client_id_names_its_producers(tmp_path: Path) -> None:
    app = App("producer-named", datadir=str(tmp_path), client_id="worker-3")
    assert _producer(app).client_options()["client_id"] == "worker-3"


# -- stand-ins for aiokafka producers ---------------------------------------------------------


class _Aio:
    """An aiokafka producer's calls the app producer makes, recorded; ``failing`` maps a call
    to the error it raises."""

    def __init__(self, log: list[str], name: str, failing: dict[str, Exception] | None = None):
        self.log, self.name, self.failing = log, name, failing or {}
        self.sent: list[dict[str, Any]] = []

    async def _call(self, what: str) -> None:
        self.log.append(f"{self.name} {what}")
        if what in self.failing:
            raise self.failing[what]

    async def start(self) -> None:
        await self._call("start")

    async def stop(self) -> None:
        await self._call("stop")

    async def flush(self) -> None:
        await self._call("flush")

    async def begin_transaction(self) -> None:
        await self._call("begin")

    async def commit_transaction(self) -> None:
        await self._call("commit")

    async def abort_transaction(self) -> None:
        await self._call("abort")

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        await self._call(f"offsets {sorted(offsets.values())} {group_id}")

    async def send(self, topic: str, value: Any, **kw: Any) -> str:
        await self._call("send")
        self.sent.append({"topic": topic, "value": value, **kw})
        return f"delivery of {self.name}"


def _started(app: Any, log: list[str], **failing: Exception) -> AppProducer:
    """The app's producer as started: its worker producer a stand-in, and each transactional
    producer it builds one that fails as ``failing`` says."""
    producer = _producer(app)
    producer.client = _Aio(log, "worker")  # type: ignore[assignment]
    producer.new_client = lambda tid=None: _Aio(log, str(tid), failing)  # type: ignore[method-assign,assignment,misc]
    return producer


async def test_each_app_producer_owns_its_transactions(tmp_path: Path) -> None:
    log: list[str] = []
    first = _started(App("first", datadir=str(tmp_path / "a")), log)
    second = _started(App("second", datadir=str(tmp_path / "b")), log)
    await first.begin_transaction("t-1")
    assert log == ["t-1 start", "t-1 begin"]
    assert first.transaction_client("t-1") is not None and first.transaction_ids() == ["t-1"]
    # Faust's driver keeps them in class attributes, shared by every producer of the process.
    assert second.transaction_client("t-1") is None and second.transaction_ids() == []
    assert first.transaction_lock("t-1") is first.transaction_lock("t-1")
    assert first.transaction_lock("t-1") is not second.transaction_lock("t-1")
    await first.maybe_begin_transaction("t-1")  # begun again on the producer it has
    assert log[2:] == ["t-1 begin"]


async def test_a_transaction_waits_for_its_lock(tmp_path: Path) -> None:
    log: list[str] = []
    producer = _started(App("locked", datadir=str(tmp_path)), log)
    await producer.begin_transaction("t-1")
    lock = producer.transaction_lock("t-1")
    await lock.acquire()  # a send in the transaction, say
    committing = asyncio.ensure_future(producer.commit_transaction("t-1"))
    sending = asyncio.ensure_future(
        producer.send("out", b"k", b"v", 0, None, None, transactional_id="t-1")
    )
    for _ in range(5):
        await asyncio.sleep(0)
    assert log == ["t-1 start", "t-1 begin"]
    lock.release()
    await committing
    await sending
    assert log[2:] == ["t-1 commit", "t-1 send"]


@pytest.mark.parametrize("call", ["begin", "commit", "abort"])
async def test_a_fenced_transaction_producer_is_stopped_and_dropped(
    tmp_path: Path, call: str
) -> None:
    log: list[str] = []
    producer = _started(App(f"fenced-{call}", datadir=str(tmp_path)), log)
    if call != "begin":
        await producer.begin_transaction("t-1")
    producer.new_client = lambda tid=None: _Aio(log, str(tid), {call: ProducerFenced()})  # type: ignore[method-assign,assignment,misc]
    if call != "begin":
        client: Any = producer.transaction_client("t-1")
        client.failing = {call: ProducerFenced()}
    await getattr(producer, f"{call}_transaction")("t-1")  # no error: Faust's driver logs it
    assert log[-2:] == [f"t-1 {call}", "t-1 stop"]
    assert producer.transaction_client("t-1") is None
    with pytest.raises(ProducerSendError, match="No transaction producer found for : t-1"):
        await producer.send("out", b"k", b"v", None, None, None, transactional_id="t-1")


async def test_another_error_in_a_transaction_call_is_logged_and_the_producer_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    producer = _started(App("timeout", datadir=str(tmp_path)), log, commit=KafkaTimeoutError())
    await producer.begin_transaction("t-1")
    with caplog.at_level(logging.WARNING):
        await producer.commit_transaction("t-1")
    assert "Exception in commit_transaction for transaction t-1" in caplog.text
    assert producer.transaction_client("t-1") is not None and "t-1 stop" not in log


async def test_a_send_is_announced_and_handed_to_aiokafka(tmp_path: Path) -> None:
    app = App("announced", datadir=str(tmp_path))
    log: list[str] = []
    producer = _started(app, log)
    announced: list[dict[str, Any]] = []

    @app.on_produce_message.connect
    def on_produce(sender: Any, signal: Any, **kwargs: Any) -> None:
        assert sender is app
        announced.append(kwargs)

    delivery = await producer.send("out", b"k", b"v", 2, 1700000000.5, {"h": b"1"})
    assert delivery == "delivery of worker"
    (sent,) = producer.client.sent  # type: ignore[union-attr]
    assert sent == {
        "topic": "out",
        "value": b"v",
        "key": b"k",
        "partition": 2,
        "timestamp_ms": 1700000000500,
        "headers": [("h", b"1")],
    }
    assert announced == [
        {
            "key": b"k",
            "value": b"v",
            "partition": 2,
            "timestamp": 1700000000.5,
            "headers": [("h", b"1")],
        }
    ]


async def test_a_kafka_error_in_a_send_raises_a_producer_send_error(tmp_path: Path) -> None:
    producer = _started(App("send-error", datadir=str(tmp_path)), [])
    producer.client.failing = {"send": KafkaConnectionError("gone")}  # type: ignore[union-attr]
    with pytest.raises(ProducerSendError, match="KafkaConnectionError"):
        await producer.send("out", b"k", b"v", None, None, None)


async def test_before_it_starts_it_is_not_ready(tmp_path: Path) -> None:
    producer = _producer(App("not-started", datadir=str(tmp_path)))
    with pytest.raises(NotReady):
        await producer.send("out", b"k", b"v", None, None, None)
    with pytest.raises(NotReady):
        producer.supports_headers()


async def test_flush_and_stop_reach_every_aiokafka_producer(tmp_path: Path) -> None:
    log: list[str] = []
    producer = _started(App("flush-stop", datadir=str(tmp_path)), log)
    await producer.begin_transaction("t-1")
    await producer.begin_transaction("t-2")
    del log[:]
    await producer.buffer.start()  # Faust's buffer of send_soon, flushed first (empty here)
    await producer.flush()
    assert log == ["worker flush", "t-1 flush", "t-2 flush"]
    del log[:]
    await producer.on_stop()
    await producer.buffer.stop()
    assert sorted(log) == ["t-1 stop", "t-2 stop", "worker stop"]
    assert producer.client is None and producer.transaction_ids() == []


async def test_a_key_goes_to_the_partition_aiokafka_s_send_picks(tmp_path: Path) -> None:
    producer = _producer(App("keys", datadir=str(tmp_path), broker="kafka://127.0.0.1:9"))
    aio = producer.client = producer.new_client()
    try:
        described = [(0, "t", False, [(0, p, 0, [0], [0]) for p in range(6)])]
        aio.client.cluster.update_metadata(
            MetadataResponse_v1([(0, "127.0.0.1", 9092, None)], 0, described)
        )
        for key in (b"a", b"user-17", b"\x00\xff", b"x" * 100):
            expected = aio._partition("t", None, None, None, key, None)  # aiokafka's pick
            assert producer.key_partition("t", key) == TP("t", expected)
        with pytest.raises(NotReady, match="no metadata for topic 'unknown'"):
            producer.key_partition("unknown", b"a")
    finally:
        await aio.stop()


async def test_topic_creation_off_only_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    producer = _producer(App("no-declare", datadir=str(tmp_path), topic_allow_declare=False))
    with caplog.at_level(logging.WARNING):
        await producer.create_topic("t", 3, 1)  # not started: nothing is asked of it
    assert "Topic creation disabled! Can't create topic t" in caplog.text


def test_a_topic_is_configured_as_faust_configures_it() -> None:
    assert topic_creation.topic_config(None, None, None, None) == {}
    assert topic_creation.topic_config(60_000, True, True, {"retention.ms": 5, "x": "y"}) == {
        "cleanup.policy": "compact,delete",
        "retention.ms": 5,
        "x": "y",
    }
    transport: Any = faust_aiokafka.Transport
    for retention, compacting, deleting in [(1000, True, None), (None, None, True), (7, 0, 1)]:
        fausts = transport._topic_config(transport, retention, compacting, deleting)
        assert topic_creation.topic_config(retention, compacting, deleting, None) == fausts


async def test_a_threaded_producer_builds_aiokafkas_own_with_the_app_producers_settings(
    tmp_path: Path,
) -> None:
    app = App("threaded", datadir=str(tmp_path), producer_threaded=True, **SETTINGS)
    threaded = _producer(app).threaded_producer
    assert isinstance(threaded, ThreadedProducer)
    built = threaded._new_producer()
    try:
        assert type(built) is aiokafka.AIOKafkaProducer
        assert built.client._client_id == "billing"
    finally:
        await built.stop()
