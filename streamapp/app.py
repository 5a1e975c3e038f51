"""`streamapp.App`: a faust.App with streamapp's defaults."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from faust.utils.urls import urllist
from mode.utils.objects import cached_property

from streamapp import assignment_wiring
from streamapp.app_base import FaustApp
from streamapp.bad_records import BadRecordPolicy, BadRecords
from streamapp.runtime.consumer import Consumer as StreamappConsumer
from streamapp.runtime.driver import driver_urls
from streamapp.runtime.flow import FlowControl
from streamapp.runtime.stores import STORE_URL, own_store_url
from streamapp.settings import RebalanceProtocol, StreamappSettings, resolve
from tables import clean_shutdown, damaged

logger = logging.getLogger(__name__)

#: How long a stopping worker waits for its last ownership record: a tiny file, so only a
#: disk that hangs makes it wait that long.
OWNERSHIP_FLUSH_S = 10.0

#: Faust's ``producer_linger`` under streamapp (seconds): a record waits up to 5 ms for others
#: to share its produce request. Faust's 0 sends whatever is there as soon as the connection
#: is free, about one produce request per two input records of a table-updating agent; 5 ms is
#: Kafka's own default since 4.0 (KIP-1030). docs/settings.md.
DEFAULT_PRODUCER_LINGER_S = 0.005
#: ``producer_linger`` under streamapp with ``processing_guarantee="exactly_once"`` (seconds). A
#: record sent in a transaction is read (``read_committed``) only once the transaction commits,
#: and a commit sends the open batches at once (aiokafka closes them), so a longer linger delays
#: no reader: it only puts more records in each produce request. Faust keeps a transactional
#: producer per source partition, each with its own requests; at 5 ms the batch agent of
#: `bench/throughput.py` spent 37 µs of CPU per record under exactly_once, at 50 ms 31 µs
#: (docs/performance.md). Kafka Streams' producers have long lingered 100 ms.
EXACTLY_ONCE_PRODUCER_LINGER_S = 0.05
#: Faust's ``broker_commit_interval`` under streamapp with ``processing_guarantee="exactly_once"``
#: (seconds; Faust's 2.8 s stays under at-least-once). A crash aborts the open transaction, and
#: the restarted worker reads its changelog records again, past its stores' committed offsets:
#: up to one interval of table writes. The ad-click demo's restart read 115 to 259 records at
#: 0.5 s, 7 to 719 at 1 s; `bench/throughput.py` under exactly_once (200,000 records) ran 7%
#: slower at 0.5 s than at 2.8 s record at a time, as fast over batches (docs/settings.md).
EXACTLY_ONCE_COMMIT_INTERVAL_S = 0.5
#: Faust's ``producer_max_batch_size`` under streamapp (bytes per partition batch): four times
#: Faust's and Kafka's 16 KiB, so a burst of changelog writes to one partition fills fewer
#: requests. docs/settings.md.
DEFAULT_PRODUCER_MAX_BATCH_SIZE = 65536


def _driver_brokers(options: dict[str, Any]) -> None:
    """Serve the app's brokers with streamapp's driver (`streamapp.runtime.driver`): the
    consumer's and the producer's broker URLs, from the App keywords or Faust's variables."""
    default = os.environ.get("BROKER_URL") or options.get("broker") or "kafka://localhost:9092"
    for key, variable in (
        ("broker_consumer", "BROKER_CONSUMER_URL"),
        ("broker_producer", "BROKER_PRODUCER_URL"),
    ):
        given = os.environ.get(variable) or options.get(key) or default
        options[key] = driver_urls(urllist(given, default_scheme="kafka"))


def _exactly_once(options: dict[str, Any]) -> bool:
    """Whether Faust will run the app under exactly_once: its PROCESSING_GUARANTEE variable
    wins over the App keyword, as in Faust's settings."""
    value = os.environ.get("PROCESSING_GUARANTEE") or options.get("processing_guarantee")
    return str(getattr(value, "value", value)) == "exactly_once"


class App(FaustApp):
    """A Faust app whose tables live in rocksdict stores and keep a standby replica.

    Use it exactly as a `faust.App`: every Faust setting is still a keyword (or Faust's
    environment variable), and topics, tables, agents and timers are Faust's. streamapp changes
    a few of Faust's defaults (a keyword you give wins): ``store="rocksdb://"`` (streamapp's
    RocksDB store, `streamapp.runtime.stores`, on Faust's on-disk layout; ``rocksdb://`` given to
    the App or to a table means it too, ``memory://`` keeps Faust's in-memory store),
    ``table_standby_replicas`` from ``num_standby_replicas``, ``producer_linger`` 5 ms (50 ms
    under exactly_once), ``producer_max_batch_size`` 64 KiB, ``broker_commit_interval`` 0.5 s
    under exactly_once (Faust's 2.8 s otherwise), ``web_bind="127.0.0.1"``, and
    streamapp's partition assignor, table manager, topic, agent, table and worker classes.

    Every streamapp keyword below is also a ``streamapp worker`` option and a ``STREAMAPP_*``
    variable: a worker option beats the variable, which beats the keyword (`resolve`). ``None``
    means not given: the default then applies.

    Args:
        id: The app's id: it names the consumer group and the tables' changelog topics.
        num_standby_replicas: Standby replicas per stateful task (default 1).
        acceptable_recovery_lag: Changelog records a worker may be behind and still take a
            task at once (default 10,000); further behind, it warms up first.
        max_warmup_replicas: Warmup replicas placed at once while state moves (default 2).
        probing_rebalance_interval_s: Seconds between follow-up rebalances while warmups
            catch up (default 30).
        capacity: This worker's relative share of work (default 1).
        create_source_topics: Let ``streamapp worker`` create missing source topics from
            their declared partition counts (default off: a missing one refuses the start).
        bad_record_policy: What a record that cannot be decoded, or whose processing raises,
            does: ``"skip"`` (default), ``"dead-letter"`` or ``"fail"`` (Faust's way).
        dead_letter_topic: Where dead letters go (default ``<id>-dead-letters``).
        client_id: This worker's id in the group (default: one kept in its data dir).
        host: The host this worker runs on, for standby placement (default: the hostname).
        rack: The rack it runs on: a standby goes to another rack first, else another host.
        static_membership: Join as a static member under the client id (default on), so a
            worker restarted within the session timeout takes its partitions back.
        leave_group_on_stop: Leave the group as a worker stops (default on); off keeps a
            static member's place through a stop, for rolling restarts without rebalances.
        rebalance_protocol: ``"cooperative"`` (default, KIP-429) or ``"eager"``.
        eos_pending_writes_max_bytes: Under exactly_once, the memory table writes may take
            while they wait for their transaction's commit (default 64 MiB); past it the
            worker commits early.
        **options: Faust's own settings, as for `faust.App`.

    Raises:
        SettingsError: A streamapp setting has a value it cannot take, from the keyword, the
            variable or the worker option (the message names which).
    """

    streamapp_settings: StreamappSettings
    streamapp_bad_records: BadRecords
    #: The app's consumer once Faust has created it (it announces itself), else None.
    streamapp_consumer: StreamappConsumer | None = None

    def __init__(
        self,
        id: str,
        *,
        num_standby_replicas: int | None = None,
        acceptable_recovery_lag: int | None = None,
        max_warmup_replicas: int | None = None,
        probing_rebalance_interval_s: float | None = None,
        capacity: int | None = None,
        create_source_topics: bool | None = None,
        bad_record_policy: BadRecordPolicy | str | None = None,
        dead_letter_topic: str | None = None,
        client_id: str | None = None,
        host: str | None = None,
        rack: str | None = None,
        static_membership: bool | None = None,
        leave_group_on_stop: bool | None = None,
        rebalance_protocol: RebalanceProtocol | str | None = None,
        eos_pending_writes_max_bytes: int | None = None,
        **options: Any,
    ) -> None:
        # None is "not given": the default then comes from StreamappSettings, and a worker
        # option or STREAMAPP_* variable may override what is given (settings.resolve).
        self.streamapp_keywords: dict[str, object] = {
            "num_standby_replicas": num_standby_replicas,
            "acceptable_recovery_lag": acceptable_recovery_lag,
            "max_warmup_replicas": max_warmup_replicas,
            "probing_rebalance_interval_s": probing_rebalance_interval_s,
            "capacity": capacity,
            "create_source_topics": create_source_topics,
            "bad_record_policy": bad_record_policy,
            "dead_letter_topic": dead_letter_topic,
            "client_id": client_id,
            "host": host,
            "rack": rack,
            "static_membership": static_membership,
            "leave_group_on_stop": leave_group_on_stop,
            "rebalance_protocol": rebalance_protocol,
            "eos_pending_writes_max_bytes": eos_pending_writes_max_bytes,
        }
        settings = resolve(self.streamapp_keywords)
        self.streamapp_settings = settings
        # streamapp's RocksDB store (streamapp.runtime.stores), also for a "rocksdb://" given.
        options["store"] = own_store_url(options.get("store") or STORE_URL)
        options.setdefault("table_standby_replicas", settings.num_standby_replicas)
        # Changelog and output records batched: see DEFAULT_PRODUCER_LINGER_S (and its
        # exactly_once value). An App keyword or Faust's PRODUCER_LINGER /
        # PRODUCER_MAX_BATCH_SIZE variables override them.
        options.setdefault(
            "producer_linger",
            EXACTLY_ONCE_PRODUCER_LINGER_S if _exactly_once(options) else DEFAULT_PRODUCER_LINGER_S,
        )
        options.setdefault("producer_max_batch_size", DEFAULT_PRODUCER_MAX_BATCH_SIZE)
        # A crash under exactly_once replays the aborted transaction: see
        # EXACTLY_ONCE_COMMIT_INTERVAL_S. An App keyword or BROKER_COMMIT_INTERVAL overrides it.
        if _exactly_once(options):
            options.setdefault("broker_commit_interval", EXACTLY_ONCE_COMMIT_INTERVAL_S)
        # Workers on one machine would all fight for port 6066; the worker command picks one.
        options.setdefault("web_bind", "127.0.0.1")
        options.setdefault("PartitionAssignor", assignment_wiring.PARTITION_ASSIGNOR)
        # The consumer, its fetch loop and the tables' recovery are streamapp's runtime.
        _driver_brokers(options)
        options.setdefault("TableManager", "streamapp.runtime.tables:TableManager")
        # Acks through the consumer's own ``ack`` (see streamapp.streams.stream).
        options.setdefault("Stream", "streamapp.streams.stream:Stream")
        # Records of a fetch in timestamp order across partitions (see streamapp.scheduling).
        options.setdefault("ConsumerScheduler", "streamapp.scheduling:TimestampOrderScheduling")
        # Records that do not decode, or make an agent raise, meet bad_record_policy.
        options.setdefault("Topic", "streamapp.bad_records:Topic")
        options.setdefault("Agent", "streamapp.bad_records:Agent")
        # A table write encodes its key and value once, for the changelog and the store alike,
        # and a windowed table's recovered windows expire (faust-streaming/faust #385).
        options.setdefault("Table", "streamapp.expiring_tables:Table")
        # A changelog record a table cannot decode is skipped by recovery, not waited for.
        options.setdefault("GlobalTable", "streamapp.changelog_records:GlobalTable")
        # A table of sets whose store holds each set as it is now (see streamapp.set_tables).
        options.setdefault("SetTable", "streamapp.set_tables:SetTable")
        options.setdefault("SetGlobalTable", "streamapp.set_tables:SetGlobalTable")
        # Disabled log levels cost nothing once the worker runs (see streamapp.faust_worker).
        options.setdefault("Worker", "streamapp.faust_worker:Worker")
        super().__init__(id, **options)
        self.streamapp_bad_records = BadRecords(self)
        assignment_wiring.install(self)

    @cached_property
    def flow_control(self) -> FlowControl:
        """Faust's flow control, whose clear hands what it drops back to the consumer
        (`streamapp.runtime.flow`)."""
        flow = FlowControl(loop=self.loop)
        flow.on_dropped = self._on_dropped
        return flow

    def _on_dropped(self, events: Any, flowing: bool) -> None:
        consumer = self.streamapp_consumer
        if consumer is not None:
            consumer.on_dropped(events, flowing)

    def GlobalTable(self, name: str, **kwargs: Any) -> Any:
        """Faust's GlobalTable, whose changelog records are stored as they arrive, for good.

        Every worker holds every partition of a global table, and any worker may write any of
        them; the others' writes reach it through the changelog. Faust stores changelog
        records of partitions it holds active in batches of ``recovery_buffer_size`` (1000 by
        default) and stops reading them after recovery unless that size is 1 (its own advice
        for global tables): with the default, a worker saw other workers' writes late or never.

        Args:
            name: The table's name.
            **kwargs: Faust's GlobalTable arguments; ``recovery_buffer_size`` defaults to 1.

        Returns:
            The global table, as `faust.App.GlobalTable` returns it.
        """
        kwargs.setdefault("recovery_buffer_size", 1)
        return super().GlobalTable(name, **kwargs)

    def SetGlobalTable(self, name: str, **kwargs: Any) -> Any:
        """Faust's SetGlobalTable, held whole by every worker as a `GlobalTable` is.

        Faust's ``app.SetGlobalTable`` creates a table that is not global: each worker held
        only the sets of its own partitions. Its changelog records are stored as they arrive,
        for the reason `GlobalTable` gives.
        """
        kwargs.setdefault("is_global", True)
        kwargs.setdefault("standby_buffer_size", 1)
        kwargs.setdefault("recovery_buffer_size", 1)
        return super().SetGlobalTable(name, **kwargs)

    async def on_first_start(self) -> None:
        await super().on_first_start()
        if not self.client_only:
            # Before any store is opened or reported to the group (see tables.clean_shutdown).
            clean_shutdown.begin_run(
                Path(self.conf.tabledir), Path(self.conf.datadir), exactly_once=self.in_transaction
            )
            # Stores that cannot be opened go aside, to be restored from their changelogs,
            # before Faust opens them and raises RocksDB's Corruption (see tables.damaged).
            damaged.set_aside_unreadable(
                Path(self.conf.tabledir), Path(self.conf.datadir), list(self.tables)
            )

    async def _flush_ownership(self) -> None:
        """Wait for the last assignment's ownership record, which the assignor writes on a
        thread (`tables.ownership_writer`): the next start reads it."""
        flush = getattr(self.assignor, "flush_ownership", None)
        if flush is not None and not await asyncio.to_thread(flush, OWNERSHIP_FLUSH_S):
            logger.warning(
                "streamapp: the ownership record was not written within %.0f s of the stop; "
                "the next start reports an older one",
                OWNERSHIP_FLUSH_S,
            )

    async def on_shutdown(self) -> None:
        # Runs after the consumer stopped: its last commit ended the transactions, or failed.
        await super().on_shutdown()
        if self.client_only:
            return
        await self._flush_ownership()
        if self.crashed:
            return
        consumer = self.streamapp_consumer
        if consumer is not None and consumer.all_progress_committed():
            clean_shutdown.mark_clean_shutdown(Path(self.conf.tabledir))
        else:
            logger.info(
                "streamapp: local state not marked clean: processed input was left uncommitted"
            )
