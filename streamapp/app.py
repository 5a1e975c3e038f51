"""`streamapp.App`: a faust.App with streamapp's defaults."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import faust
from faust.types import TransportT

from streamapp import assignment_wiring, transport
from streamapp.settings import StreamappSettings
from tables import clean_shutdown

logger = logging.getLogger(__name__)


class App(faust.App):
    """A Faust app whose tables live in rocksdict stores and keep a standby replica.

    Use it exactly as a `faust.App`. The extra keyword arguments are streamapp's own settings
    (see `StreamappSettings`); a worker started with ``streamapp worker`` may override them.
    """

    streamapp_settings: StreamappSettings

    def __init__(
        self,
        id: str,
        *,
        num_standby_replicas: int = 1,
        acceptable_recovery_lag: int = 10_000,
        max_warmup_replicas: int = 2,
        probing_rebalance_interval_s: float = 30.0,
        capacity: int = 1,
        **options: Any,
    ) -> None:
        settings = StreamappSettings(
            capacity=capacity,
            num_standby_replicas=num_standby_replicas,
            acceptable_recovery_lag=acceptable_recovery_lag,
            max_warmup_replicas=max_warmup_replicas,
            probing_rebalance_interval_s=probing_rebalance_interval_s,
        ).with_env()
        self.streamapp_settings = settings
        options.setdefault("store", "rocksdb://")
        options.setdefault("table_standby_replicas", settings.num_standby_replicas)
        # Workers on one machine would all fight for port 6066; the worker command picks one.
        options.setdefault("web_bind", "127.0.0.1")
        options.setdefault("PartitionAssignor", assignment_wiring.PARTITION_ASSIGNOR)
        super().__init__(id, **options)
        assignment_wiring.install(self)

    def _new_transport(self) -> TransportT:
        # Faust's, except that the consumer runs our assignor even without tables or standbys.
        return assignment_wiring.new_transport(self)

    async def on_first_start(self) -> None:
        await super().on_first_start()
        if not self.client_only:
            # Before any store is opened or reported to the group (see tables.clean_shutdown).
            clean_shutdown.begin_run(
                Path(self.conf.tabledir), Path(self.conf.datadir), exactly_once=self.in_transaction
            )

    async def on_shutdown(self) -> None:
        # Runs after the consumer stopped: its last commit ended the transactions, or failed.
        await super().on_shutdown()
        if self.client_only or self.crashed:
            return
        consumer = self._consumer
        if isinstance(consumer, transport.Consumer) and consumer.all_progress_committed():
            clean_shutdown.mark_clean_shutdown(Path(self.conf.tabledir))
        else:
            logger.info(
                "streamapp: local state not marked clean: processed input was left uncommitted"
            )
