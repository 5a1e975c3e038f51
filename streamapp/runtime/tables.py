"""streamapp's table manager (the App's ``TableManager`` setting): the app's tables, and their
recovery, read by the fetch loop.

Faust's table manager runs a recovery service of its own beside the fetch loop, moving the
same consumer's positions from a second task, and hands it changelog records through a queue
the flow control may clear. Here the fetch loop reads the changelogs too: at each rebalance this
manager decides which changelog partitions are replayed and from where (`replay.Recovery`), the
loop hands it their records as it takes them (`apply_records`), and after each round it checks
whether the restored partitions reached their ends (`after_round`). Once every partition the
assignment gained has, the tables are told, and the gained source partitions are sought and let
out (`rebalance.Rebalance.release`).

Damaged local state is set aside before it is used, and rebuilt from the changelog:

- a store that cannot be opened, before it is opened (`tables.store_guard`);
- a store whose persisted offset lies beyond its changelog's end (the changelog was deleted and
  created again), and one whose changelog's log start has passed the next record it needs
  (records deleted by retention or DeleteRecords, which the replay would skip over state they
  had changed): replayed from the log start instead;
- a store of a partition the changelog no longer has.

Under exactly_once a store's writes, and its offset, reach it once the transactions that carried
their changelog records have committed (`on_commit`; `streamapp.runtime.store_commits`): Faust
keeps the offset aside keyed by changelog partition, then looks it up by the committed source
partitions and never finds one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, MutableMapping, Sequence
from time import monotonic
from typing import Any

from aiokafka import ConsumerRecord
from faust.types import TP, AppT, CollectionT, StoreT
from faust.types.tables import TableManagerT
from mode import Service
from mode.utils.collections import FastUserDict

from streamapp.runtime import store_opening
from streamapp.runtime.changelog_apply import RawChangelog
from streamapp.runtime.messages import consumer_message
from streamapp.runtime.partitions_text import partitions_text
from streamapp.runtime.replay import Recovery, Restore
from streamapp.runtime.store_commits import StoreCommits
from tables import store_guard
from tables.damaged import offset_beyond_end, records_missing_before_start

logger = logging.getLogger(__name__)

#: How often the ends of the changelogs being restored are asked again: one deleted and created
#: again meanwhile ends before the end the restore was to reach, which it would never reach.
ENDS_RECHECK_S = 2.0


class TableManager(Service, TableManagerT, FastUserDict[str, CollectionT]):
    """The app's tables and their recovery (see the module)."""

    def __init__(self, app: AppT, **kwargs: Any) -> None:
        Service.__init__(self, **kwargs)
        self.app = app
        self.data: MutableMapping[str, CollectionT] = {}
        self.by_changelog: dict[str, CollectionT] = {}
        self.actives_ready = False
        self.standbys_ready = False
        self.recovery = Recovery()
        #: Under exactly_once: the stores' writes and offsets waiting for their commit.
        self.store_commits = StoreCommits(app, self)
        self._registered = asyncio.Event()
        self.tables_final = False
        self._restore_pending = False
        #: When the ends of the partitions being restored were last asked again.
        self._ends_checked = 0.0

    # -- the tables --------------------------------------------------------------------------

    def __hash__(self) -> int:
        return object.__hash__(self)

    def add(self, table: CollectionT) -> CollectionT:
        if self.tables_final:
            raise RuntimeError("Too late to add tables at this point")
        assert table.name is not None
        if table.name in self:
            raise ValueError(f"Table with name {table.name!r} already exists")
        self[table.name] = table
        self.by_changelog[table.changelog_topic.get_topic_name()] = table
        return table

    @property
    def changelog_topics(self) -> set[str]:
        return set(self.by_changelog)

    def table_of(self, tp: TP) -> CollectionT | None:
        return self.by_changelog.get(tp.topic)

    async def on_start(self) -> None:
        # Tables are declared at import, agents as they start: the tables are final once the
        # worker has started them.
        await self.sleep(1.0)
        if self.should_stop:
            return
        self.tables_final = True
        for table in self.values():
            # The conductor subscribes to (and declares) every channel it holds: the changelog
            # topics too. The fetch loop gives their records to this manager, not to streams.
            self.app.topics.add(table.changelog_topic)
            await table.maybe_start()
        self._registered.set()

    async def on_stop(self) -> None:
        for table in self.values():
            await table.stop()

    async def wait_until_tables_registered(self) -> None:
        if not self.app.producer_only and not self.app.client_only:
            await self.wait_for_stopped(self._registered)  # type: ignore[arg-type]

    async def wait_until_recovery_completed(self) -> bool:
        if self.app.producer_only or self.app.client_only:
            return False
        return await self.wait_for_stopped(self.recovery.completed)  # type: ignore[arg-type]

    # -- writes and offsets under exactly_once ---------------------------------------------

    def persist_offset_on_commit(self, store: StoreT[Any, Any], tp: TP, offset: int) -> None:
        self.store_commits.persist_offset_on_commit(store, tp, offset)

    def on_commit(self, offsets: MutableMapping[TP, int]) -> None:
        """A commit went through: store what its transactions wrote (`StoreCommits`)."""
        self.store_commits.on_commit(offsets)

    def pending_bytes(self) -> int:
        """About the memory the writes waiting for a commit take (exactly_once)."""
        return self.store_commits.pending_bytes()

    # -- rebalances --------------------------------------------------------------------------

    def on_rebalance_start(self) -> None:
        self.actives_ready = False
        self.standbys_ready = False

    def on_actives_ready(self) -> None:
        self.actives_ready = True

    def on_standbys_ready(self) -> None:
        self.standbys_ready = True

    def on_partitions_revoked(self, revoked: set[TP]) -> None:
        # Faust's app calls this too as the worker stops, before the consumer's last commit:
        # the pending writes wait for that commit, which stores those it commits.
        changelogs = self.by_changelog
        self.recovery.forget(tp for tp in revoked if tp.topic in changelogs)

    def on_revoked_after_commit(self, revoked: set[TP]) -> None:
        """A rebalance gave ``revoked`` up, after committing what it processed: what the
        partitions still have pending will never be committed here."""
        self.store_commits.on_revoked(revoked)
        self.on_partitions_revoked(revoked)

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        """Open the assignment's stores and decide what is replayed from where."""
        self.tables_final = True
        changelogs = self.by_changelog
        assignor = self.app.assignor
        actives = {tp for tp in assignor.assigned_actives() if tp.topic in changelogs}
        standbys = {tp for tp in assignor.assigned_standbys() if tp.topic in changelogs}
        standbys -= actives
        # Writes and offsets waiting for a commit of partitions no longer active here, or of
        # partitions gained (a store starts from what it holds): that commit never comes.
        self.store_commits.on_assigned(assigned, actives, newly_assigned)
        consumer: Any = self.app.consumer
        for table in self.values():
            await store_opening.one_store_a_turn(table, assigned, store_guard.set_aside_unreadable)
            count = consumer.topic_partitions(table.changelog_topic.get_topic_name())
            store_guard.set_aside_beyond_partition_count(table, count)
            await store_opening.one_store_a_turn(
                table, actives | standbys, store_opening.open_store
            )
        for table in self.values():
            await table.on_rebalance(assigned, revoked, newly_assigned, generation_id)
        await self._plan(actives, standbys)

    async def _plan(self, actives: set[TP], standbys: set[TP]) -> None:
        recovery = self.recovery
        # Replicas given up or promoted; actives given up (kept as standbys or not at all).
        recovery.forget([tp for tp in recovery.standby_tps if tp not in standbys])
        recovery.forget([tp for tp in recovery.settled | recovery.read_on if tp not in actives])
        restoring = set(recovery.restore.ends) if recovery.restore is not None else set()
        gained = actives - recovery.settled - restoring
        new_standbys = standbys - recovery.standby_tps
        starts = await self._starts(gained | new_standbys)
        ends = await self.app.consumer.highwaters(*gained) if gained else {}
        for tp in sorted(new_standbys):
            recovery.standby_tps.add(tp)
            recovery.standby_offsets[tp] = starts[tp] - 1
        recovery.begin(
            {tp: ends.get(tp, 0) for tp in gained},
            {tp: starts[tp] - 1 for tp in gained},
            starts_at=monotonic() + float(self.app.conf.stream_recovery_delay or 0.0),
        )
        for tp in gained:
            recovery.reached(tp, starts[tp])  # nothing to replay: restored already
        for tp in gained:
            table = self.by_changelog[tp.topic]
            if table.is_global:
                recovery.read_on.add(tp)
        self._restore_pending = True
        seeks = {tp: starts[tp] for tp in gained | new_standbys}
        if seeks:
            await self.app.consumer.fetch_loop.seek(seeks)  # type: ignore[attr-defined]
        if gained:
            remaining = sum(max(0, ends.get(tp, 0) - starts[tp]) for tp in gained)
            logger.info(
                "streamapp: restoring %s: %d records to replay",
                partitions_text(gained),
                remaining,
            )

    async def _starts(self, tps: set[TP]) -> dict[TP, int]:
        """Where each partition's replay starts: after its store's offset, or at the log start
        for an empty store or a damaged one (set aside here)."""
        if not tps:
            return {}
        consumer: Any = self.app.consumer
        persisted = {tp: self.by_changelog[tp.topic].persisted_offset(tp) for tp in tps}
        ends = await consumer.highwaters(*tps)
        log_starts = await consumer.earliest_offsets(*tps)
        starts: dict[TP, int] = {}
        for tp in sorted(tps):
            offset = persisted.get(tp)
            log_start = log_starts.get(tp, 0)
            end = ends.get(tp)
            highwater = None if end is None else end - 1
            if offset is not None and offset_beyond_end(offset, highwater):
                self._rebuild(
                    tp,
                    f"changelog {tp.topic} ends at {end} but the local store claims {offset + 1}",
                )
                offset = None
            elif offset is not None and records_missing_before_start(offset, log_start):
                self._rebuild(
                    tp,
                    f"changelog {tp.topic} starts at {log_start} but the local "
                    f"store needs its records from {offset + 1} (deleted by "
                    f"retention or DeleteRecords)",
                    "the changelog's start",
                )
                offset = None
            starts[tp] = log_start if offset is None else max(offset + 1, log_start)
        return starts

    def _rebuild(self, tp: TP, why: str, source: str = "the changelog") -> None:
        table = self.by_changelog[tp.topic]
        target = store_guard.close_and_move_aside(table, tp.partition)
        logger.warning(
            "streamapp: local store of table %s partition %d: %s: rebuilt from %s "
            "(store moved to %s)",
            table.name,
            tp.partition,
            why,
            source,
            target,
        )

    # -- the fetch loop's part ---------------------------------------------------------------

    def partitions_to_read(self) -> set[TP]:
        return self.recovery.partitions_to_read(monotonic())

    async def apply_records(self, tp: TP, records: Sequence[ConsumerRecord[Any, Any]]) -> None:
        """Apply changelog records the fetch loop took to their table's store: as their bytes
        where the table allows it (`changelog_apply.RawChangelog`), else through Faust."""
        table = self.by_changelog.get(tp.topic)
        if table is None:
            return
        applied = self.recovery.applied_offset(tp)
        if applied is not None and applied >= 0 and records[0].offset <= applied:
            # The changelog's offsets went back: it was deleted and created again while this
            # worker replayed it. What the store holds is the old topic's.
            self._rebuild(
                tp,
                f"changelog {tp.topic} went back to offset {records[0].offset} past the "
                f"local store's {applied + 1} (deleted and created again)",
            )
        raw = RawChangelog.of(table)
        if raw is None or not raw.apply(tp, records):
            # Faust's path: each record decoded into an event, and the events applied.
            decode = table.changelog_topic.decode
            events = []
            for record in records:
                message = consumer_message(tp, record)
                event = await decode(message, propagate=True)
                if event is not None:
                    events.append(event)
            if events:
                table.apply_changelog_batch(events)
                for event in events:
                    await table.on_changelog_event(event)
        self.recovery.applied(tp, records[-1].offset)
        self.recovery.records_applied += len(records)

    async def after_round(self) -> None:
        recovery = self.recovery
        restore = recovery.restore
        if restore is None:
            return
        if restore.ends and monotonic() - self._ends_checked >= ENDS_RECHECK_S:
            self._ends_checked = monotonic()
            await self._check_ends(restore.ends)
        position = self.app.consumer.fetch_loop.position  # type: ignore[attr-defined]
        for tp in list(restore.ends):
            found = await position(tp)
            if found is not None:
                recovery.reached(tp, found)
        done = recovery.done(monotonic())
        if done is not None and self._restore_pending:
            self._restore_pending = False
            await self._completed(done)

    async def _check_ends(self, targets: dict[TP, int]) -> None:
        """A changelog whose end went back since the restore began was deleted and created
        again: its replay starts again from the new log's start, over a store rebuilt."""
        consumer: Any = self.app.consumer
        ends = await consumer.highwaters(*targets)
        shrunk = {tp: end for tp, end in ends.items() if tp in targets and end < targets[tp]}
        if not shrunk:
            return
        starts = await consumer.earliest_offsets(*shrunk)
        for tp, end in sorted(shrunk.items()):
            self._rebuild(
                tp,
                f"changelog {tp.topic} now ends at {end}, before the {targets[tp]} its replay "
                "was to reach (deleted and created again)",
            )
            start = starts.get(tp, 0)
            self.recovery.restart(tp, start, end)
        await consumer.fetch_loop.seek({tp: starts.get(tp, 0) for tp in shrunk})

    async def _completed(self, restore: Restore) -> None:
        recovery = self.recovery
        restored = restore.partitions
        if restore.ended_past_records:
            logger.info(
                "streamapp: replay ended at the changelog end offset (consumer position "
                "reached it; no record at the offset below it): %s",
                ", ".join(
                    f"{tp.topic}[{tp.partition}]@{end}"
                    for tp, end in sorted(restore.ended_past_records.items())
                ),
            )
        for table in self.values():
            topic = table.changelog_topic.get_topic_name()
            await table.on_recovery_completed(
                {tp for tp in restored if tp.topic == topic},
                {tp for tp in recovery.standby_tps if tp.topic == topic},
            )
        self.on_actives_ready()
        await self.app.on_rebalance_complete.send()
        if restored:
            logger.info("streamapp: restored %s", partitions_text(restored))
        recovery.completed.set()
        await self.app.consumer.rebalance.release()  # type: ignore[attr-defined]


def changelog_partitions(tables: Iterable[CollectionT], tps: Iterable[TP]) -> set[TP]:
    topics = {table.changelog_topic.get_topic_name() for table in tables}
    return {tp for tp in tps if tp.topic in topics}
