"""The worker's Kafka consumer: aiokafka's ``AIOKafkaConsumer`` running streamapp's coordinator.

aiokafka's ``AIOKafkaConsumer.start`` builds its fetcher and its group coordinator itself, the
coordinator from its module's ``GroupCoordinator``: no argument picks another one. So
`WorkerConsumer.start` takes the same steps, in the same order and with the same arguments,
building streamapp's `Coordinator` instead. A consumer without a group starts as aiokafka's.

aiokafka internals (listed in `streamapp.runtime.group.PRIVATE_NAMES`): what ``start`` reads
and sets, ``AIOKafkaConsumer._client``, ``_subscription``, ``_fetcher``, ``_coordinator``,
``_loop``, ``_wait_topics`` and the settings it keeps from its constructor.
Tests: tests/unit/streamapp/runtime/group/test_static_membership.py (its stop),
tests/unit/streamapp/runtime/test_stock_classes.py; tests/integration/test_stock_clients.py
(its coordinator) and every test that runs a worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiokafka
from aiokafka.consumer.fetcher import Fetcher

from streamapp.runtime.client_log import ClientLog
from streamapp.runtime.group.coordinator import Coordinator
from streamapp.runtime.group.join_answers import AIOKAFKA_MESSAGES


class WorkerConsumer(aiokafka.AIOKafkaConsumer):  # type: ignore[misc]
    """aiokafka's consumer with streamapp's group protocol (`Coordinator`) and log
    (`streamapp.runtime.client_log`).

    Built with aiokafka's own arguments, and streamapp's: ``leave_group_on_stop`` (a static
    member's stop sends LeaveGroup), ``on_fenced`` (called once with one line when another
    worker took this one's ``group_instance_id``; by default the worker stops) and ``role``
    (what it is to the worker, ``"consumer"`` or ``"offsets reader"``: with its ``client_id``,
    it names the consumer in its log lines, as the client id does in the broker's).
    """

    #: aiokafka's, set by ``start`` (None before).
    _fetcher: Any

    def __init__(
        self,
        *topics: str,
        leave_group_on_stop: bool = True,
        on_fenced: Callable[[str], None] | None = None,
        role: str = "consumer",
        **options: Any,
    ) -> None:
        super().__init__(*topics, **options)
        #: streamapp's options of its coordinator.
        self.group_options: dict[str, Any] = {
            "leave_group_on_stop": leave_group_on_stop,
            "on_fenced": on_fenced,
        }
        client_id = options.get("client_id") or f"aiokafka-{aiokafka.__version__}"
        self.client_log = ClientLog(role, client_id, reported_elsewhere=AIOKAFKA_MESSAGES)

    async def start(self) -> None:
        """aiokafka's start, with streamapp's coordinator for a consumer in a group."""
        with self.client_log.scope():
            if self._group_id is None:
                await super().start()
                return
            assert self._loop is asyncio.get_running_loop(), (
                "Please create objects with the same loop as running with"
            )
            assert self._fetcher is None, "Did you call `start` twice?"
            await self._client.bootstrap()
            await self._wait_topics()
            self._fetcher = Fetcher(
                self._client,
                self._subscription,
                key_deserializer=self._key_deserializer,
                value_deserializer=self._value_deserializer,
                fetch_min_bytes=self._fetch_min_bytes,
                fetch_max_bytes=self._fetch_max_bytes,
                fetch_max_wait_ms=self._fetch_max_wait_ms,
                max_partition_fetch_bytes=self._max_partition_fetch_bytes,
                check_crcs=self._check_crcs,
                fetcher_timeout=self._consumer_timeout,
                retry_backoff_ms=self._retry_backoff_ms,
                auto_offset_reset=self._auto_offset_reset,
                isolation_level=self._isolation_level,
                client_rack=self._client_rack,
            )
            self._coordinator = Coordinator(
                self._client,
                self._subscription,
                group_id=self._group_id,
                group_instance_id=self._group_instance_id,
                heartbeat_interval_ms=self._heartbeat_interval_ms,
                session_timeout_ms=self._session_timeout_ms,
                retry_backoff_ms=self._retry_backoff_ms,
                enable_auto_commit=self._enable_auto_commit,
                auto_commit_interval_ms=self._auto_commit_interval_ms,
                assignors=self._partition_assignment_strategy,
                exclude_internal_topics=self._exclude_internal_topics,
                rebalance_timeout_ms=self._rebalance_timeout_ms,
                max_poll_interval_ms=self._max_poll_interval_ms,
                **self.group_options,
            )
            subscription = self._subscription.subscription
            if subscription is not None:
                if self._subscription.partitions_auto_assigned():
                    # Subscribed before the start (topics given, or ``subscribe``).
                    await self._subscription.wait_for_assignment()
                else:
                    # Assigned before the start: aiokafka's ``assign`` left this task to it.
                    self._coordinator.start_commit_offsets_refresh_task(subscription.assignment)

    @property
    def fetch_wait_ms(self) -> int:
        """How long a fetch request waits for records at the broker (aiokafka's
        ``fetch_max_wait_ms``, read as each request is built)."""
        fetcher = self._fetcher
        wait = self._fetch_max_wait_ms if fetcher is None else fetcher._fetch_max_wait_ms
        return int(wait)

    @fetch_wait_ms.setter
    def fetch_wait_ms(self, wait_ms: int) -> None:
        fetcher = self._fetcher
        if fetcher is not None:
            fetcher._fetch_max_wait_ms = wait_ms

    def membership(self) -> tuple[str | None, int]:
        """This member's id and generation in its group (None, -1: not in one yet)."""
        coordinator = self._coordinator
        if coordinator is None or self._group_id is None:
            return None, -1
        member_id = coordinator.member_id
        generation = coordinator.generation
        return (member_id or None), int(generation if generation is not None else -1)

    def request_rejoin(self) -> None:
        """Ask the group to rebalance (a follow-up rebalance)."""
        coordinator = self._coordinator
        if coordinator is not None and self._group_id is not None:
            coordinator.request_rejoin()

    async def refresh_metadata(self) -> None:
        """Fresh cluster metadata (a topic created, deleted or resized since it last asked)."""
        with self.client_log.scope():
            await self._client.force_metadata_update()

    async def stop(self) -> None:
        with self.client_log.scope():
            await super().stop()
        self.client_log.close()

    # The calls below talk to brokers in their caller's task: what aiokafka logs there is this
    # consumer's too.

    async def commit(self, offsets: Any = None) -> None:
        with self.client_log.scope():
            await super().commit(offsets)

    async def committed(self, partition: Any) -> Any:
        with self.client_log.scope():
            return await super().committed(partition)

    async def seek_to_committed(self, *partitions: Any) -> Any:
        with self.client_log.scope():
            return await super().seek_to_committed(*partitions)

    async def end_offsets(self, partitions: Any) -> Any:
        with self.client_log.scope():
            return await super().end_offsets(partitions)

    async def beginning_offsets(self, partitions: Any) -> Any:
        with self.client_log.scope():
            return await super().beginning_offsets(partitions)
