"""Faust's table recovery, with no stream record processed against a store that lacks records
recovery has counted as applied.

Faust's `Recovery` counts a changelog record as applied (``active_offsets``,
``standby_offsets``) as soon as it takes the record from the changelog queue, but writes
records to the store in batches of ``recovery_buffer_size`` / ``standby_buffer_size`` (1000 by
default). It writes a batch when it is full, when a recovery that replayed something ends, at a
revocation, as an incremental rebalance begins (a promoted standby's replay starts at its store's
offset), and as the next recovery starts; nowhere else. Two paths therefore let agents read a
store that is missing records its offsets claim (updates lost):

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
raises ``ConsistencyError`` (`Recovery._build_offsets`, and `Recovery._build_highwaters` for a
standby whose changelog was recreated while the recovery ran); a store whose changelog's log
start has passed the next record it needs (retention, DeleteRecords), which Faust would replay
from the log start over state the deleted records had changed (also `Recovery._build_offsets`);
a store of a partition the changelog no longer has.

Where a replay ends. Faust takes the end offset less one for a changelog's last record
and replays until a record with that offset arrives. Under exactly_once the end offset is the last
stable offset and the offset below it a commit marker, which is never delivered as a record: every
replay then waited out two five-second idle timeouts of Faust's loop and its fallback (about 15 s
a rebalance). A replay of a partition now also ends once the consumer's position has reached the
end offset and every record it has passed has been taken from the changelog queue
(`Recovery._end_replays_at_end_offsets`): then there is no record left below the end offset to
come, whatever the offsets in between held (markers, aborted records, records compacted away).
The partition's offset is then set to the end offset less one, as Faust's fallback does, so the
progress reported while restoring (``active_remaining``) stays true. That every record below the
position has been taken is known from the position noted as a fetch of Faust's fetch loop began
(`streamapp.faust_compat.transport`, 16), which comes right after the replay's last records were
handed out; only a position passing a transaction marker fetched on its own, within a fetch, waits
for the fetch after it (up to a second).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from faust.tables.manager import TableManager as FaustTableManager
from faust.tables.recovery import Recovery as FaustRecovery
from faust.types import TP
from faust.types.transports import ConsumerT
from mode import Service
from mode.utils.queues import ThrowableQueue

from streamapp.faust_compat import incremental, recovery_hold
from streamapp.faust_compat.transport import Consumer, aiokafka_position
from streamapp.runtime.stores import RocksDBStore
from tables import store_guard
from tables.damaged import offset_beyond_end, records_missing_before_start

logger = logging.getLogger(__name__)

# Faust private (checked at import, see `streamapp.faust_compat`): ``Recovery._build_offsets``,
# the step of ``_restart_recovery`` that seeds where each partition's replay starts, run after
# the actives' highwaters are known and before the consistency check; ``_seek_offsets``, the
# step that seeks the partitions to replay, run right before it decides whether to replay the
# actives and waits for the end of it; ``_build_highwaters``, which builds the standbys' ends
# right before Faust's consistency check of them.

#: How often a replay asks where the consumer stands in the actives' changelogs.
POSITION_PROBE_INTERVAL_S = 0.1


def handed_out_through(consumer: ConsumerT, tp: TP) -> int | None:
    """The offset of the last record of ``tp`` Faust's fetch loop handed out (to the changelog
    queue, for a changelog) since ``tp`` was last sought, else the offset it was sought to;
    None: neither (sought to offset 0, nothing handed out since).

    Faust private: ``Consumer._read_offset``, which the fetch loop sets after it handed out each
    record, and which ``seek_wait`` sets to the offset it seeks to (and drops for offset 0).
    """
    read_offset: Mapping[TP, int | None] = consumer._read_offset  # type: ignore[attr-defined]
    return read_offset.get(tp)


def consumer_position(consumer: ConsumerT, tp: TP) -> int | None:
    """aiokafka's position of ``tp`` (`transport.aiokafka_position`); None: none yet.

    Read in place from this thread rather than asked of the consumer thread, whose calls wait
    behind the fetch in progress (up to a second while the changelogs are idle). Private names
    of Faust: ``_thread``, ``_consumer``, its consumer thread's aiokafka consumer.
    """
    thread = getattr(consumer, "_thread", None)
    aiokafka_consumer = getattr(thread, "_consumer", None)
    if aiokafka_consumer is None:
        return None
    return aiokafka_position(aiokafka_consumer, tp)


def fetches_started(consumer: ConsumerT) -> int | None:
    """How many fetches Faust's fetch loop has begun: a streamapp consumer counts them (see
    `transport`, 10), as every record of a fetch is handed out before the next one
    begins. None for another consumer: replays then end only where Faust ends them."""
    started = getattr(consumer, "fetches_started", None)
    return started if isinstance(started, int) else None


def pending_persisted_offsets(tables: FaustTableManager) -> MutableMapping[TP, tuple[Any, int]]:
    """Faust private: ``TableManager._pending_persisted_offsets``, changelog partition ->
    (store, offset of its last changelog record written), filled by
    ``persist_offset_on_commit`` under exactly_once."""
    pending: MutableMapping[TP, tuple[Any, int]] = tables._pending_persisted_offsets
    return pending


@dataclass
class _Replay:
    """The replay of the actives' changelogs under way (set once they are sought)."""

    generation: int
    #: The fetch loop's ``fetches_started`` once the replay's partitions were sought: a fetch
    #: begun later began after the seek (see `Recovery._reached_as_fetch_began`).
    fetches_at_seek: int = -1
    #: Partitions whose replay ended at the end offset with no record there: tp -> end offset.
    ended_at_end: dict[TP, int] = field(default_factory=dict)
    reported: bool = False


class Recovery(FaustRecovery):
    _replay: _Replay | None = None
    #: Active changelog partitions recovered and in use (not replayed again by an
    #: incremental rebalance that keeps them).
    _settled_actives: frozenset[TP] = frozenset()
    #: Whether the recovery under way was started by an incremental rebalance.
    incremental_pass = False

    def _end_replay(self) -> None:
        self._replay = None
        consumer = self.app.consumer
        if isinstance(consumer, Consumer):
            consumer.watch_positions(set())

    def on_partitions_revoked(self, revoked: set[TP]) -> None:
        self._end_replay()
        super().on_partitions_revoked(revoked)  # writes the buffers
        # Unprocessed, so uncounted: the next assignment's seeks fetch them again.
        self.tables.changelog_queue.clear()

    def revoke_incrementally(self, revoked: set[TP]) -> None:
        """Partitions lost in an incremental rebalance: their buffers are written; the changelog
        queue keeps what it holds for the partitions kept (those of the revoked ones are dropped
        as they are taken: no longer active or standby here, once the assignment is applied)."""
        super().on_partitions_revoked(revoked)
        self._settled_actives -= revoked

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        self._end_replay()
        recovery_hold.HOLD.on_rebalance()  # test only, off unless set
        if incremental.incremental_join(self.app):
            self._on_rebalance_incrementally(revoked, generation_id)
        else:
            self.incremental_pass = False
            self._settled_actives = frozenset()
            await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)
        for tp in [tp for tp in self.standby_offsets if tp not in self.standby_tps]:
            del self.standby_offsets[tp]

    def _on_rebalance_incrementally(self, revoked: set[TP], generation_id: int) -> None:
        # Faust's on_rebalance, except that active partitions already recovered stay out of
        # recovery (agents write them now: a replay would put older values over newer ones),
        # and that recovery starts only when something is to be read afresh.
        app = self.app
        changelogs = self.tables._changelogs
        # `add_active` seeds a promoted standby's replay from its store's persisted offset,
        # while up to standby_buffer_size - 1 of the records recovery took for it may still sit
        # in the buffer. Faust writes them as an eager rebalance revokes; an incremental one
        # that revokes nothing does not, and the promotion replayed them all again (past the
        # acceptable recovery lag).
        self.flush_buffers()
        for tp in revoked:
            self.revoke(tp)
        self.standby_tps.clear()
        self.active_tps.clear()
        self.actives_for_table.clear()
        self.standbys_for_table.clear()
        for tp in app.assignor.assigned_standbys():
            table = changelogs.get(tp.topic)
            if table is not None:
                self.add_standby(table, tp)
        actives = set()
        for tp in app.assignor.assigned_actives():
            table = changelogs.get(tp.topic)
            if table is None:
                continue
            actives.add(tp)
            # A table read on after its recovery (a recovery buffer of one record: Faust's
            # advice for global tables) stays in recovery's actives.
            if tp in self._settled_actives and table.recovery_buffer_size != 1:
                continue
            self.add_active(table, tp)
        self._settled_actives &= frozenset(actives)
        for tp in [tp for tp in self.active_offsets if tp not in actives]:
            del self.active_offsets[tp]
        # Standbys too, kept ones included: Faust's table manager paused every changelog
        # partition of the assignment as this rebalance began (``_update_channels``), and
        # leaves the standbys to the recovery that follows, which seeks them to their offsets
        # and resumes them. Without one they stayed paused (replicas and warmups replayed
        # nothing until a rebalance recovered something). And they must be sought, not only
        # resumed: records of theirs the fetch loop was handing out as that pause came were
        # dropped by Faust's getmany after aiokafka's position had passed them, and resumed
        # where it stood a standby would have skipped them for good.
        needed = bool(self.active_tps) or bool(self.standby_tps) or self.incremental_pass
        if needed:
            self.incremental_pass = True
            self._generation_id = generation_id
            incremental.handler(app).pass_requested()
            self.signal_recovery_start.set()
        elif isinstance(consumer := app.consumer, Consumer):
            consumer.restore_fetch_wait()  # no recovery follows (transport fix 16)

    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        try:
            await self._on_recovery_completed(generation_id)
        finally:
            # After the stream partitions resumed: the fetch in flight as they did was a short
            # one, so their first fetch follows at once (transport fix 16).
            consumer = self.app.consumer
            if isinstance(consumer, Consumer):
                consumer.restore_fetch_wait()

    async def _on_recovery_completed(self, generation_id: int) -> None:
        # Runs before the stream partitions resume (Faust resumes them in this method).
        if self.signal_recovery_start.is_set():
            # A rebalance began after this pass's last step, and its own pass completes it.
            # Faust's loop runs this inside a wait that raises RebalanceAgain and cancels it at
            # its first await, but what came before that await ran on the new rebalance's
            # state: it took the new pass's `incremental_pass` (which then completed Faust's
            # eager way, seeking every stream partition back to its committed offset), and
            # counted the new rebalance's gained actives as recovered before their replay.
            return
        self._end_replay()
        self.flush_buffers()
        # Faust keeps reading the actives of a table whose recovery buffer holds one record
        # (its advice for global tables, which every worker writes): each record is stored as
        # it is taken, and other workers' writes must keep arriving.
        done = {tp for tp in self.active_tps if self.tp_to_table[tp].recovery_buffer_size != 1}
        if done:
            self.app.consumer.pause_partitions(done)
        self._settled_actives |= frozenset(self.active_tps)
        if self.incremental_pass:
            self.incremental_pass = False
            await self._complete_incrementally()
            return
        await super().on_recovery_completed(generation_id)
        if generation_id == self.app.consumer_generation_id:  # not cut short by a rebalance
            incremental.handler(self.app).eager_pending = False
        # Faust resumed the flow last (emptying the streams' queues): only now may records of
        # the stream partitions reach those queues (see transport's release_streams_after_seek).
        consumer = self.app.consumer
        if isinstance(consumer, Consumer):
            consumer.release_streams_after_seek()

    async def _complete_incrementally(self) -> None:
        # Faust's on_recovery_completed, but for the partitions gained only (see
        # `streamapp.faust_compat.incremental`): no stream partition kept is sought or resumed.
        self._set_recovery_ended()
        callbacks = [
            asyncio.ensure_future(
                table.on_recovery_completed(
                    self.actives_for_table[table], self.standbys_for_table[table]
                )
            )
            for table in self.tables.values()
        ]
        if callbacks:
            await asyncio.wait(callbacks)
        self.completed.set()
        await incremental.handler(self.app).on_recovered()

    async def _seek_offsets(
        self, consumer: ConsumerT, tps: set[TP], offsets: Counter[TP], title: str
    ) -> None:
        await super()._seek_offsets(consumer, tps, offsets, title)
        if title == "active":
            # Faust's _restart_recovery now decides whether to replay and waits for the replay
            # to end: from here its offsets, highwaters and positions are this replay's, and
            # `_end_replays_at_end_offsets` may end it. An end signalled before (Faust's loop
            # signals whenever nothing seemed to be left, highwaters not built yet included)
            # would end this replay before it began.
            self.signal_recovery_end.clear()
            consumer = self.app.consumer
            self._replay = _Replay(
                self.app.consumer_generation_id, fetches_at_seek=fetches_started(consumer) or 0
            )
            if isinstance(consumer, Consumer):
                consumer.watch_positions(set(tps))

    def _replay_current(self, replay: _Replay) -> bool:
        return (
            self._replay is replay
            and self.in_recovery
            and not self.signal_recovery_start.is_set()
            and self.app.consumer_generation_id == replay.generation
        )

    def _replay_short_of_end(self) -> dict[TP, int]:
        """Actives whose replay has not reached the end offset: tp -> end offset."""
        return {
            tp: highwater + 1
            for tp, highwater in self.active_highwaters.items()
            if tp in self.active_tps
            and highwater is not None
            and highwater >= 0
            and (offset := self.active_offsets.get(tp)) is not None
            and offset < highwater
        }

    @Service.task
    async def _end_replays_at_end_offsets(self) -> None:
        # Faust's own loop notices the end of a replay only when the record at the end offset
        # less one arrives, or after two idle timeouts (see the module docs).
        while not self.should_stop:
            await self.sleep(POSITION_PROBE_INTERVAL_S)
            replay = self._replay
            if replay is None or not self._replay_current(replay):
                continue
            try:
                await self._probe_replay(replay)
            except Exception as exc:  # e.g. a partition no longer assigned (rebalance)
                logger.debug("streamapp: replay position probe: %r", exc)

    async def _probe_replay(self, replay: _Replay) -> None:
        consumer = self.app.consumer
        if fetches_started(consumer) is None:
            return
        short = self._replay_short_of_end()
        if short:
            reached = self._reached_as_fetch_began(consumer, short, replay)
            if not reached:
                reached = {
                    tp: end
                    for tp, end in short.items()
                    if (position := consumer_position(consumer, tp)) is not None and position >= end
                }
                if not reached:
                    return
                # Every record below those positions has been fetched. Once the fetch loop
                # begins its next fetch, it has handed every one of them to the changelog
                # queue. (Reached here, not as a fetch began: the position passed a
                # transaction marker fetched alone, in the fetch under way.)
                mark = fetches_started(consumer)
                while fetches_started(consumer) == mark:
                    await self.sleep(POSITION_PROBE_INTERVAL_S / 4)
                    if not self._replay_current(replay):
                        return
                if not self._replay_current(replay):
                    return
            for tp, end in reached.items():
                offset = self.active_offsets.get(tp)
                through = handed_out_through(consumer, tp)
                if offset is None or (through is not None and offset < through):
                    continue  # records handed out are still in the queue: not applied yet
                # Nothing is left below the end offset to come: the offsets up to it held
                # markers, aborted or compacted records. Faust's fallback sets the same.
                if offset < end - 1:
                    self.active_offsets[tp] = end - 1
                    replay.ended_at_end[tp] = end
        if self.need_recovery():
            return
        if replay.ended_at_end and not replay.reported:
            replay.reported = True
            logger.info(
                "streamapp: replay ended at the changelog end offset (consumer position "
                "reached it; no record at the offset below it): %s",
                ", ".join(
                    f"{tp.topic}[{tp.partition}]@{end}"
                    for tp, end in sorted(replay.ended_at_end.items())
                ),
            )
        # As Faust's loop does when its own count says the replay is done. Set again at
        # every probe until the replay ends: Faust's loop clears it as it takes each record,
        # and _restart_recovery may only be about to wait for it.
        self.signal_recovery_end.set()

    @staticmethod
    def _reached_as_fetch_began(
        consumer: ConsumerT, short: Mapping[TP, int], replay: _Replay
    ) -> dict[TP, int]:
        """Partitions of ``short`` whose position had reached the end offset as a fetch of
        the fetch loop began, after the replay's seek: every record below it was returned by
        an earlier fetch, and so handed out (transport fix 17). No wait for a further fetch."""
        if not isinstance(consumer, Consumer):
            return {}
        started, positions = consumer.positions_at_fetch_start()
        if started <= replay.fetches_at_seek:
            return {}  # begun before the seek: its positions may be the old assignment's
        return {
            tp: end
            for tp, end in short.items()
            if (position := positions.get(tp)) is not None and position >= end
        }

    async def _build_offsets(
        self, consumer: ConsumerT, tps: set[TP], destination: Counter[TP], title: str
    ) -> None:
        # Faust's (private, checked at import), once stores that claim more than their
        # changelog holds are set aside: their offsets are in ``destination`` (from
        # `add_active` / `add_standby`), and replay then starts at the log's start.
        persisted_offsets: dict[TP, int | None] = {}
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
                persisted_offsets[tp] = destination.get(tp)
        # A log start later than the next record a store needs means records it needs were
        # deleted (retention, DeleteRecords). Replay would lay what remains over state they
        # had changed, so the store goes, and the replay starts at the log start as for an
        # empty store. The log start is asked of the broker here, not read back from Faust's
        # start (the later of the store's offset and the log start less one): under the
        # cooperative protocol recovery takes the records of the standbys it keeps while this
        # awaits, and an offset advanced meanwhile passed for a log start that had moved on.
        # The store of a standby that was replicating was then set aside as trimmed and its
        # replay began where the records taken had brought it: a promoted warmup in the
        # benchmark's scale-out missed 659 of its partition's keys.
        needing = sorted(tp for tp, persisted in persisted_offsets.items() if persisted is not None)
        starts = await consumer.earliest_offsets(*needing) if needing else {}
        await super()._build_offsets(consumer, tps, destination, title)
        for tp in needing:
            persisted, log_start = persisted_offsets[tp], starts.get(tp)
            if records_missing_before_start(persisted, log_start):
                assert persisted is not None and log_start is not None
                self._rebuild_trimmed(tp, persisted, log_start)
                destination[tp] = log_start - 1

    async def _build_highwaters(
        self, consumer: ConsumerT, tps: set[TP], destination: Counter[TP], title: str
    ) -> None:
        await super()._build_highwaters(consumer, tps, destination, title)
        if title != "standby":
            return
        # Faust builds the standbys' highwaters once their replay has been sought, then raises
        # ``ConsistencyError`` (the worker crashes) for a store beyond them. `_build_offsets`
        # set such stores aside earlier in this recovery, but a changelog deleted and created
        # again in between (a fresh, empty topic) puts them beyond its end only now: one of
        # the CI runs lost a worker so. The store is rebuilt here too, and its replay sought
        # back to the new log's start (the standbys are still paused).
        rebuilt: dict[TP, int] = {}
        for tp in sorted(tps):
            persisted = self.standby_offsets.get(tp)
            if offset_beyond_end(persisted, destination.get(tp)):
                assert persisted is not None
                self._rebuild(tp, persisted, destination[tp])
                self.standby_offsets[tp] = -1  # Faust's "nothing applied yet"
                rebuilt[tp] = 0
        if rebuilt:
            await consumer.seek_wait(rebuilt)

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

    def _rebuild_trimmed(self, tp: TP, persisted: int, log_start: int) -> None:
        table = self.tp_to_table[tp]
        target = store_guard.close_and_move_aside(table, tp.partition)
        logger.warning(
            "streamapp: local store of table %s partition %d: changelog %s starts at %d but "
            "the local store needs its records from %d (deleted by retention or "
            "DeleteRecords): rebuilt from the changelog's start (store moved to %s)",
            table.name,
            tp.partition,
            tp.topic,
            log_start,
            persisted + 1,
            target,
        )


class ChangelogQueue(ThrowableQueue[Any]):
    """The changelog queue, whose ``get`` (recovery's, as it takes each record) skips records
    of partitions recovery neither restores nor replicates any more.

    An incremental rebalance leaves the queue as it is (it holds the records of the standbys
    kept), so records fetched for a changelog partition given up are still taken after it.
    Faust's recovery means to skip such a record ("recovery unknown topic"), but goes on with
    the table, offsets and buffer of the record it took before: the record was written to the
    given-up partition's store (of that other record's table) and its offset set in the
    standby or active offsets of a partition this worker no longer has.
    """

    def __init__(self, recovering: Callable[[TP], bool], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._recovering = recovering
        #: Records skipped so far (the tests).
        self.skipped = 0

    async def get(self) -> Any:
        while True:
            await recovery_hold.HOLD.wait()  # test only, off unless set
            event = await super().get()
            message = getattr(event, "message", None)
            if message is None or self._recovering(message.tp):
                return event
            self.skipped += 1


#: How long the event loop runs other work before each store a rebalance opens. One turn of the
#: loop (``sleep(0)``) was not enough: a tick of a kept partition takes several turns from its
#: fetch to its agent, and with an open in every turn it waited for several opens (the stall
#: sampler still saw stalls spanning 2 to 8 opens). Each open costs 25 ms (median, load 9), so a
#: rebalance that opens six stores takes 60 ms longer, on the partitions it gains only.
PAUSE_BETWEEN_OPENS = 0.01


async def _one_store_a_turn(
    table: Any, tps: set[TP], step: Callable[[Any, list[TP]], object]
) -> None:
    """``step`` for each of the table's changelog partitions in ``tps`` whose store is not open
    here, one per turn of the event loop.

    Both steps open a RocksDB store: the check for damage a read-only one, Faust's recovery (its
    ``add_standby`` and ``add_active``, which read each store's persisted offset) the store
    itself. Faust opens every store a rebalance assigns in one go, without yielding, and
    rocksdict holds the GIL through an open (tens of ms on a busy machine, more to create a
    store): run on a thread, an open stops the event loop just the same. A worker given several
    replicas at once (a rolling restart, a scale-out) stopped the partitions it kept for the sum
    of those opens; here each stop is one open, and the kept partitions' records are processed
    between them.
    """
    store = store_guard.rocksdb_store(table)
    if not isinstance(store, RocksDBStore):
        return
    topic = store_guard.changelog_topic(table)
    for tp in sorted(tp for tp in tps if tp.topic == topic):
        if tp.partition in store.open_handles:
            continue  # open already: neither step has anything to do
        closing = store.pending_close(tp.partition)
        if closing is not None:
            # Revoked a moment ago: its close (off the event loop) releases the store's lock.
            await asyncio.wrap_future(closing)
        else:
            await asyncio.sleep(PAUSE_BETWEEN_OPENS)
        if tp.partition not in store.open_handles:
            step(table, [tp])


def _open_store(table: Any, tps: list[TP]) -> None:
    """Open the stores of ``tps`` as Faust's recovery would, reading their persisted offsets."""
    for tp in tps:
        try:
            table.persisted_offset(tp)
        except Exception as exc:  # rocksdict raises plain Exception
            # Left to Faust's own open, next: it retries a lock and raises anything else.
            logger.debug("streamapp: store %s %s not opened ahead: %s", table.name, tp, exc)


class TableManager(FaustTableManager):
    """Faust's table manager, recovering through `Recovery` (set as ``TableManager``).

    Under exactly_once Faust keeps each store's changelog offset aside until the transaction
    that wrote it commits (``persist_offset_on_commit``), keyed by changelog partition, and at a
    commit looks it up by the committed source partitions: it never finds one, so no store ever
    had an offset. Every restart replayed every changelog from its start over the store, and a
    store whose changelog was recreated or trimmed could not be told from a current one. Here
    an offset is persisted once the transaction it was written in has committed (see
    `on_commit`).
    """

    def on_commit(self, offsets: MutableMapping[TP, int]) -> None:
        super().on_commit(offsets)
        pending = pending_persisted_offsets(self)  # empty but under exactly_once
        if not pending:
            return
        # Faust's transactional id of a record is "<app id>-<topic group>-<partition>" (its
        # TransactionManager's send and commit): a committed source partition committed the
        # changelog records written under the same group and partition.
        committed = {
            (group, tp.partition)
            for tp in offsets
            if (group := self._topic_group(tp.topic)) is not None
        }
        for tp, (store, offset) in list(pending.items()):
            if (self._topic_group(tp.topic), tp.partition) in committed:
                store.set_persisted_offset(tp, offset)
                # Written: a later entry for the partition starts afresh, and none lingers
                # for a partition revoked (its store closed) since.
                del pending[tp]

    def _topic_group(self, topic: str) -> int | None:
        try:
            return self.app.assignor.group_for_topic(topic)
        except KeyError:  # a topic the assignor has not grouped (not subscribed)
            return None

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        # Before Faust opens the assigned stores (its tables' own on_rebalance), where a
        # store that cannot be opened would raise RocksDB's Corruption out of the rebalance.
        # The active ones are marked first, every table's, and durably before any store is
        # opened: from here agents may write to them, and after a crash under exactly_once a
        # marked store is discarded (tables.clean_shutdown). The marks' fsyncs run on a
        # thread; the kept partitions are processed meanwhile.
        actives = self.app.assignor.assigned_actives()
        standbys = self.app.assignor.assigned_standbys()
        await store_guard.mark_assigned_actives(self.values(), actives)
        for table in self.values():
            await _one_store_a_turn(table, assigned, store_guard.set_aside_unreadable)
            count = self.app.consumer.topic_partitions(store_guard.changelog_topic(table))
            store_guard.set_aside_beyond_partition_count(table, count)
            await _one_store_a_turn(table, actives | standbys, _open_store)
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)

    @property
    def changelog_queue(self) -> ThrowableQueue[Any]:
        # Faust's, but not cleared on every flow resume (see the module docs, path 3), and
        # giving recovery only records of partitions it restores or replicates.
        if self._changelog_queue is None:
            self._changelog_queue = ChangelogQueue(
                self._recovering,
                maxsize=self.app.conf.stream_buffer_maxsize,
                flow_control=self.app.flow_control,
                clear_on_resume=False,
            )
        return self._changelog_queue

    def _recovering(self, tp: TP) -> bool:
        recovery = self.recovery
        return tp in recovery.active_tps or tp in recovery.standby_tps

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = Recovery(self.app, self, beacon=self.beacon, loop=self.loop)
        assert isinstance(self._recovery, Recovery)
        return self._recovery
