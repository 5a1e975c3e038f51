"""Faust's table recovery, with no stream record processed against a store that lacks records
recovery has counted as applied.

Faust's `Recovery` counts a changelog record as applied (``active_offsets``,
``standby_offsets``) as soon as it takes the record from the changelog queue, but writes
records to the store in batches of ``recovery_buffer_size`` / ``standby_buffer_size`` (1000 by
default). It writes a batch when it is full, when a recovery that replayed something ends, at a
revocation, and as the next recovery starts; nowhere else. Two paths therefore let agents read a
store that is missing records its offsets claim (updates lost: issue 11):

1. A rebalance that promotes a standby. Records fetched for the standby around the rebalance are
   taken from the queue after the new assignment made the partition active: they advance
   ``active_offsets`` and sit in the buffer. Recovery then starts at the end of the log, has
   nothing to replay, ends without writing the buffer, and the agents resume on the store
   without them.
2. An active changelog partition left resumed after a recovery with nothing to replay (Faust
   pauses actives only after a replay). The worker's own table writes come back from the
   changelog, are buffered, and are written later, over values the agents wrote since.

3. The changelog queue emptied under a replica that is reading. Faust's table manager creates
   the queue ``clear_on_resume``, and every ``app.flow_control.resume()`` (recovery calls it
   as standbys start and again as streams resume, a restarted agent calls it too) drops what
   the queue holds. Records a standby (or warmup) had fetched were dropped uncounted, the ones
   fetched next were applied, and the standby's offset passed the dropped ones for good: a
   fresh standby promoted later held a few hundred of its thousand records. The queue is now
   emptied only at a revocation, when what it holds belongs to the old assignment and every
   changelog partition is sought afresh; records fetched under an earlier generation are
   dropped as they arrive (`streamapp.faust_compat.transport.Consumer`).

Kafka Streams keeps its checkpoint strictly behind the data it covers. The same rule here: before
stream processing resumes, every buffered record is written to its store and the actives'
changelog partitions are paused (but for those Faust keeps reading: see
`Recovery.on_recovery_completed`). Offsets kept for partitions that are no longer standbys here
are dropped (Faust left them, and reported a promoted partition as a standby still).

Damaged local state (`tables.damaged`) is set aside before Faust trips on it, and recovery
rebuilds it from the changelog: a store that cannot be opened, before Faust opens it at an
assignment (`TableManager.on_rebalance`); a store whose persisted offset lies beyond its
changelog's end, as after the topic was deleted and recreated, before Faust's consistency check
raises ``ConsistencyError`` (`Recovery._build_offsets`); a store of a partition the changelog no
longer has.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from faust.tables.manager import TableManager as FaustTableManager
from faust.tables.recovery import Recovery as FaustRecovery
from faust.types import TP
from faust.types.transports import ConsumerT
from mode.utils.queues import ThrowableQueue

from tables import store_guard
from tables.damaged import offset_beyond_end

logger = logging.getLogger(__name__)

# Faust private: the step of `Recovery._restart_recovery` that seeds where each partition's
# replay starts, run after the actives' highwaters are known and before the consistency check.
if not callable(getattr(FaustRecovery, "_build_offsets", None)):
    raise ImportError("faust.tables.recovery.Recovery no longer has _build_offsets")


class Recovery(FaustRecovery):
    def on_partitions_revoked(self, revoked: set[TP]) -> None:
        super().on_partitions_revoked(revoked)  # writes the buffers
        # Unprocessed, so uncounted: the next assignment's seeks fetch them again.
        self.tables.changelog_queue.clear()

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)
        for tp in [tp for tp in self.standby_offsets if tp not in self.standby_tps]:
            del self.standby_offsets[tp]

    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        # Runs before the stream partitions resume (Faust resumes them in this method).
        self.flush_buffers()
        # Faust keeps reading the actives of a table whose recovery buffer holds one record
        # (its advice for global tables, which every worker writes): each record is stored as
        # it is taken, and other workers' writes must keep arriving.
        done = {tp for tp in self.active_tps if self.tp_to_table[tp].recovery_buffer_size != 1}
        if done:
            self.app.consumer.pause_partitions(done)
        await super().on_recovery_completed(generation_id)

    async def _build_offsets(
        self, consumer: ConsumerT, tps: set[TP], destination: Counter[TP], title: str
    ) -> None:
        # Faust's (private, see the import check), once stores that claim more than their
        # changelog holds are set aside: their offsets are in ``destination`` (from
        # `add_active` / `add_standby`), and replay then starts at the log's start.
        if tps:
            if title == "active":
                # The very numbers Faust's consistency check compares against, built just now.
                highwaters: Mapping[TP, int] = self.active_highwaters
            else:
                # Faust builds the standbys' only after seeking them; the end only grows, so
                # what is beyond it now would be beyond it then.
                ends = await consumer.highwaters(*tps)
                highwaters = {tp: end - 1 if end is not None else -1 for tp, end in ends.items()}
            for tp in sorted(tps):
                persisted = destination.get(tp)
                if offset_beyond_end(persisted, highwaters.get(tp)):
                    assert persisted is not None
                    self._rebuild(tp, persisted, highwaters[tp])
                    destination[tp] = None  # type: ignore[assignment]  # as Faust's own _add
        await super()._build_offsets(consumer, tps, destination, title)

    def _rebuild(self, tp: TP, persisted: int, highwater: int) -> None:
        table = self.tp_to_table[tp]
        target = store_guard.close_and_move_aside(table, tp.partition)
        # In end offsets (the next offset to read), as the inventory reports them to the group.
        logger.warning(
            "streamapp: local store of table %s partition %d: changelog %s ends at %d but the "
            "local store claims %d: rebuilt from the changelog (store moved to %s)",
            table.name,
            tp.partition,
            tp.topic,
            highwater + 1,
            persisted + 1,
            target,
        )


class TableManager(FaustTableManager):
    """Faust's table manager, recovering through `Recovery` (set as ``TableManager``)."""

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        # Before Faust opens the assigned stores (its tables' own on_rebalance), where a
        # store that cannot be opened would raise RocksDB's Corruption out of the rebalance.
        for table in self.values():
            store_guard.set_aside_unreadable(table, assigned)
            count = self.app.consumer.topic_partitions(store_guard.changelog_topic(table))
            store_guard.set_aside_beyond_partition_count(table, count)
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)

    @property
    def changelog_queue(self) -> ThrowableQueue[Any]:
        # Faust's, but not cleared on every flow resume (see the module docs, path 3).
        if self._changelog_queue is None:
            self._changelog_queue = self.app.FlowControlQueue(
                maxsize=self.app.conf.stream_buffer_maxsize, clear_on_resume=False
            )
        return self._changelog_queue

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = Recovery(self.app, self, beacon=self.beacon, loop=self.loop)
        assert isinstance(self._recovery, Recovery)
        return self._recovery
