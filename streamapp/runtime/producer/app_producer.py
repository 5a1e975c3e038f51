"""The app's producer: Faust's ``ProducerT``, on the worker's aiokafka producers.

Faust asks the app's producer (``app.producer``, made by the transport: `streamapp.runtime.driver`)
to send, flush, create topics and, under exactly_once, to begin, commit and abort the
transactions of the source partitions. `AppProducer` does it on aiokafka's public API, with
`streamapp.runtime.producer.client.WorkerProducer` as its aiokafka producers:

- the worker's producer (`AppProducer.client`), built as the producer starts with the settings
  Faust's aiokafka driver gives its own (`AppProducer.client_options`), named by the worker's
  client id (`streamapp.runtime.worker_clients.worker_client_id`);
- under exactly_once, one transactional producer per transactional id, begun as Faust's
  transaction manager assigns a partition, each with a lock that a send in the transaction,
  its commit and the next begin hold (`transaction_client`, `transaction_lock`). They belong
  to this producer: a second app in the process has its own.

What Faust's users rely on is kept: a fenced transactional producer (``ProducerFenced`` as a
transaction begins, commits or aborts) is stopped and dropped, later sends in its transaction
raise ``ProducerSendError`` and Faust's commit warns of it; a ``KafkaError`` from a send raises
``ProducerSendError``; each send is announced on the app's ``on_produce_message`` signal.

A threaded producer (``producer_threaded``) is Faust's, building aiokafka's own producer with
these settings (`streamapp.sending.threaded_producer`).
Tests: tests/unit/streamapp/runtime/producer/test_app_producer.py,
tests/unit/streamapp/runtime/test_clients.py; tests/integration/test_app_producer.py,
tests/integration/test_eos_sends.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from contextlib import nullcontext
from typing import Any, cast

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.util import parse_kafka_version
from faust.exceptions import NotReady, ProducerSendError
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth, server_list
from faust.transport.producer import Producer
from faust.types import TP, HeadersArg, RecordMetadata
from mode import Seconds
from mode.threads import ServiceThread
from mode.utils.times import want_seconds

from streamapp.runtime.producer import topic_creation
from streamapp.runtime.producer.client import WorkerProducer
from streamapp.runtime.worker_clients import worker_client_id

logger = logging.getLogger(__name__)


class AppProducer(Producer):
    """Faust's producer of the app, on streamapp's aiokafka producers (see the module)."""

    #: Whether sends carry their headers: aiokafka writes record batches that hold them;
    #: off only when the app names a broker API version older than Kafka 0.11's.
    allow_headers: bool = True

    @property
    def shortlabel(self) -> str:
        """Its name in the log's lines, Faust's (``[^--Producer]: ...``): log filters, and
        streamapp's own (`streamapp.quiet_logs`), know the app's producer by it."""
        return "Producer"

    def __post_init__(self) -> None:
        # Called by Faust's constructor once its settings (linger, acks, ...) are read.
        self.announce_send = self.app.on_produce_message.send
        if self.partitioner is None:
            self.partitioner = DefaultPartitioner()
        api_version = self.app.conf.producer_api_version
        if api_version != "auto" and parse_kafka_version(api_version) < (0, 11):
            self.allow_headers = False
        #: The worker's aiokafka producer: built as this one starts, None once it stopped.
        self.client: WorkerProducer | None = None
        #: transactional id -> its aiokafka producer (a fenced one is dropped).
        self._transaction_clients: dict[str, WorkerProducer] = {}
        #: transactional id -> the lock its sends, its commit and the next begin hold.
        self._transaction_locks: dict[str, asyncio.Lock] = {}
        #: topic -> its creation under way: a second call for it waits for that one.
        self._topic_creations: dict[str, asyncio.Future[bool]] = {}
        self._admin: AIOKafkaAdminClient | None = None
        self._admin_start = asyncio.Lock()  # two topics created at once start one admin client

    # -- the aiokafka producers --------------------------------------------------------------

    def client_options(self, transactional_id: str | None = None) -> dict[str, Any]:
        """aiokafka's keyword arguments for one of this producer's aiokafka producers: the
        settings Faust's aiokafka driver gives its own, under the worker's client id; under
        exactly_once idempotent, acknowledged by every in-sync replica, and with
        ``transactional_id``."""
        conf = self.app.conf
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers(),
            "client_id": worker_client_id(self.app),
            "acks": self.acks,
            "linger_ms": self.linger_ms,
            "max_batch_size": self.max_batch_size,
            "max_request_size": self.max_request_size,
            "compression_type": self.compression_type,
            "security_protocol": "SSL" if self.ssl_context else "PLAINTEXT",
            "partitioner": self.partitioner,
            "request_timeout_ms": int(self.request_timeout * 1000),
            "metadata_max_age_ms": conf.producer_metadata_max_age_ms,
            "connections_max_idle_ms": conf.producer_connections_max_idle_ms,
            **self.auth_options(),
        }
        if self.app.in_transaction:
            options.update(acks="all", enable_idempotence=True)
        options["transactional_id"] = transactional_id
        return options

    def bootstrap_servers(self) -> list[str]:
        """The brokers of the transport's URLs, as aiokafka takes them."""
        transport: Any = self.transport
        return server_list(transport.url, transport.default_port)

    def auth_options(self) -> dict[str, Any]:
        """aiokafka's security keywords for the app's credentials and SSL context."""
        return dict(credentials_to_aiokafka_auth(self.credentials, self.ssl_context))

    def new_client(self, transactional_id: str | None = None) -> WorkerProducer:
        """An aiokafka producer of this producer's, not started."""
        return WorkerProducer(**self.client_options(transactional_id))

    def started_client(self) -> WorkerProducer:
        """The worker's aiokafka producer; ``NotReady`` before this producer started."""
        if self.client is None:
            raise NotReady("Producer service not yet started")
        return self.client

    def transaction_client(self, transactional_id: str) -> WorkerProducer | None:
        """The aiokafka producer of a transaction; None if none was begun or it was fenced."""
        return self._transaction_clients.get(transactional_id)

    def transaction_lock(self, transactional_id: str) -> asyncio.Lock:
        """The lock of a transaction: held by its sends, its commit and the next begin."""
        lock = self._transaction_locks.get(transactional_id)
        if lock is None:
            lock = self._transaction_locks[transactional_id] = asyncio.Lock()
        return lock

    def transaction_ids(self) -> list[str]:
        """The transactions that have a producer now."""
        return list(self._transaction_clients)

    async def on_start(self) -> None:
        await super().on_start()  # Faust's: the buffer of send_soon runs with this producer
        self.client_id = worker_client_id(self.app)
        client = self.client = self.new_client()
        self.beacon.add(client)
        await client.start()

    async def on_stop(self) -> None:
        await super().on_stop()
        client, self.client = self.client, None
        transaction_clients = list(self._transaction_clients.values())
        self._transaction_clients.clear()
        for creation in self._topic_creations.values():
            creation.cancel()
        self._topic_creations.clear()
        if client is not None:
            await client.stop()
        for transaction_client in transaction_clients:
            await transaction_client.stop()
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.close()

    # -- transactions ------------------------------------------------------------------------

    async def begin_transaction(self, transactional_id: str) -> None:
        """Begin the transaction, starting its producer first if it has none."""
        try:
            client = self._transaction_clients.get(transactional_id)
            if client is None:
                client = self.new_client(transactional_id)
                await client.start()
                self._transaction_clients[transactional_id] = client
            async with self.transaction_lock(transactional_id):
                self.started_client()
                await client.begin_transaction()
        except Exception as exc:
            await self._transaction_failed("begin_transaction", transactional_id, exc)

    async def maybe_begin_transaction(self, transactional_id: str) -> None:
        await self.begin_transaction(transactional_id)

    async def commit_transaction(self, transactional_id: str) -> None:
        await self._end_transaction(transactional_id, commit=True)

    async def abort_transaction(self, transactional_id: str) -> None:
        await self._end_transaction(transactional_id, commit=False)

    async def _end_transaction(self, transactional_id: str, *, commit: bool) -> None:
        call = "commit_transaction" if commit else "abort_transaction"
        try:
            async with self.transaction_lock(transactional_id):
                client = self._transaction_clients.get(transactional_id)
                if client is None:
                    logger.warning(
                        "%s invoked for unknown transaction %s",
                        "Commit" if commit else "Abort",
                        transactional_id,
                    )
                    return
                await (client.commit_transaction() if commit else client.abort_transaction())
        except Exception as exc:
            await self._transaction_failed(call, transactional_id, exc)

    async def _transaction_failed(self, call: str, transactional_id: str, exc: Exception) -> None:
        # Faust's driver: a fenced producer is stopped and dropped (another worker owns the
        # transactional id now); any other error is logged, and the transaction goes on.
        if isinstance(exc, ProducerFenced):
            logger.info("Current Producer for transaction %s fenced", transactional_id)
            await self.stop_transaction(transactional_id)
        else:
            logger.warning(
                "Exception in %s for transaction %s exception %s", call, transactional_id, exc
            )

    async def stop_transaction(self, transactional_id: str) -> None:
        """Stop the transaction's producer: whatever it had not committed is aborted by the
        broker as the next owner of the transactional id begins."""
        client = self._transaction_clients.pop(transactional_id, None)
        if client is not None:
            await client.stop()

    async def commit_transactions(
        self,
        tid_to_offset_map: Mapping[str, Mapping[TP, int]],
        group_id: str,
        start_new_transaction: bool = True,
    ) -> None:
        """Commit each transaction with its offsets, one after the other (Faust's commit;
        streamapp's transaction manager commits them side by side:
        `streamapp.sending.sends`)."""
        for transactional_id, offsets in tid_to_offset_map.items():
            async with self.transaction_lock(transactional_id):
                client = self._transaction_clients.get(transactional_id)
                if client is None:
                    logger.warning("Commit invoked for unknown transaction %s", transactional_id)
                    continue
                await client.send_offsets_to_transaction(offsets, group_id)
                await client.commit_transaction()
                if start_new_transaction:
                    await client.begin_transaction()

    # -- sends -------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp: float | None,
        headers: HeadersArg | None,
        *,
        transactional_id: str | None = None,
    ) -> Awaitable[RecordMetadata]:
        """Hand the record to aiokafka (in the transaction, if one is named); returns its
        delivery future."""
        client = self.started_client()
        if transactional_id:
            transaction_client = self._transaction_clients.get(transactional_id)
            if transaction_client is None:
                raise ProducerSendError(f"No transaction producer found for : {transactional_id}")
            client = transaction_client
        if isinstance(headers, Mapping):
            headers = list(headers.items())
        self.announce_send(
            key=key, value=value, partition=partition, timestamp=timestamp, headers=headers
        )
        if not self.allow_headers:
            headers = None
        timestamp_ms = int(timestamp * 1000.0) if timestamp is not None else None
        # A transaction's sends hold its lock, as its commit does.
        lock = self.transaction_lock(transactional_id) if transactional_id else nullcontext()
        try:
            async with lock:
                return cast(
                    Awaitable[RecordMetadata],
                    await client.send(
                        topic,
                        value,
                        key=key,
                        partition=partition,
                        timestamp_ms=timestamp_ms,
                        headers=headers,
                    ),
                )
        except KafkaError as exc:
            raise ProducerSendError(f"Error while sending: {exc!r}") from exc

    async def send_and_wait(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp: float | None,
        headers: HeadersArg | None,
        *,
        transactional_id: str | None = None,
    ) -> RecordMetadata:
        delivery = await self.send(
            topic, key, value, partition, timestamp, headers, transactional_id=transactional_id
        )
        return await delivery

    async def flush(self) -> None:
        """Every record sent so far delivered: the buffer of ``send_soon`` first, then every
        aiokafka producer's."""
        await self.buffer.flush()
        if self.client is not None:
            await self.client.flush()
        for transaction_client in list(self._transaction_clients.values()):
            await transaction_client.flush()

    def key_partition(self, topic: str, key: bytes) -> TP:
        """The partition a record with ``key`` (and no partition given) goes to: the
        partitioner's pick among the topic's partitions in the producer's metadata, as
        aiokafka's send picks it."""
        cluster = self.started_client().client.cluster
        partitions = cluster.partitions_for_topic(topic)
        if partitions is None:
            raise NotReady(f"the producer has no metadata for topic {topic!r} yet")
        every = list(partitions)
        available = list(cluster.available_partitions_for_topic(topic))
        partitioner: Any = self.partitioner
        return TP(topic, partitioner(key, every, available))

    def supports_headers(self) -> bool:
        """True once started: aiokafka writes record batches that carry headers."""
        self.started_client()
        return self.allow_headers

    # -- topics ------------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        partitions: int,
        replication: int,
        *,
        config: Mapping[str, Any] | None = None,
        timeout: Seconds = 20.0,
        retention: Seconds | None = None,
        compacting: bool | None = None,
        deleting: bool | None = None,
        ensure_created: bool = False,
    ) -> None:
        """Create the topic unless it exists (`topic_creation`), then refresh the producer's
        metadata; nothing but a warning if the app does not declare topics
        (``topic_allow_declare``)."""
        if not self.app.conf.topic_allow_declare:
            logger.warning("Topic creation disabled! Can't create topic %s", topic)
            return
        client = self.started_client()
        under_way = self._topic_creations.get(topic)
        if under_way is None:
            retention_ms = int(want_seconds(retention) * 1000.0) if retention else None
            creation = topic_creation.create_topic(
                self.started_admin,
                set(client.client.cluster.topics()),
                topic,
                partitions,
                replication,
                config=topic_creation.topic_config(retention_ms, compacting, deleting, config),
                timeout_ms=int(want_seconds(timeout) * 1000.0),
                ensure_created=ensure_created,
                log=self.log,
            )
            under_way = self._topic_creations[topic] = asyncio.ensure_future(creation)
            under_way.add_done_callback(lambda _: self._topic_creations.pop(topic, None))
        # Shielded: a caller that gives up leaves the creation to those still waiting for it.
        waited = await self.wait(asyncio.shield(under_way))
        if waited.stopped:  # as Faust's driver: a producer that stops creates no more topics
            self.log.info("Shutting down - skipping creation of topic %r.", topic)
            return
        await client.client.force_metadata_update()

    async def started_admin(self) -> AIOKafkaAdminClient:
        """The admin client topics are created with: the producer's brokers, client id,
        timeouts and credentials; started as it is first asked for, closed as this producer
        stops."""
        async with self._admin_start:
            if self._admin is None:
                conf = self.app.conf
                admin = AIOKafkaAdminClient(
                    bootstrap_servers=self.bootstrap_servers(),
                    client_id=worker_client_id(self.app),
                    request_timeout_ms=int(self.request_timeout * 1000),
                    metadata_max_age_ms=conf.producer_metadata_max_age_ms,
                    connections_max_idle_ms=conf.producer_connections_max_idle_ms,
                    **self.auth_options(),
                )
                await admin.start()
                self._admin = admin
            return self._admin

    # -- a threaded producer (``producer_threaded``) -----------------------------------------

    def create_threaded_producer(self) -> ServiceThread:
        """Faust's threaded producer, on aiokafka's own producer with this one's settings."""
        from streamapp.sending.threaded_producer import ThreadedProducer

        return ThreadedProducer(self, app=self.app)
