"""Faust's rebalance handling made incremental, for a group that runs the cooperative protocol.

Under the cooperative protocol (KIP-429, `streamapp.runtime.group.cooperative`) a worker keeps
what it owns through a rebalance, and learns afterwards what it lost and what it gained. Faust's
handlers still treat every rebalance as a new start: ``App._on_partitions_revoked`` stops the
whole flow, clears every stream's queue and pauses the whole assignment, and
``App._on_partitions_assigned`` pauses every partition, runs a recovery of every active table
partition and seeks every stream partition back to its committed offset. A rebalance that
changed nothing for a worker stopped it all the same.

For a join the coordinator completed cooperatively (the assignor's ``incremental_join``), this
module handles the rebalance instead, partition by partition:

- *Nothing lost, nothing gained*: nothing stops. The signals are sent, the tables' and
  recovery's sets are brought up to date, and no partition is paused, sought or recovered.
- *Lost partitions*: only those stop (`streamapp.faust_compat.transport.Consumer` pauses them,
  hands none of their records out any more, waits for those handed out to be processed and
  commits their offsets before Faust forgets them: at-least-once, as transport fix 9 does for
  a whole assignment), and their table partitions are revoked. Under exactly_once that commit
  ends their transactions, and their transactional producers are stopped here, before the
  coordinator rejoins and the partitions are handed to their next owner.
- *Gained partitions*: only those are paused while their tables recover; kept partitions keep
  flowing. Under exactly_once their transactional producers start first (Faust's
  ``TransactionManager.on_rebalance``, for the gained partitions only): each one's
  InitProducerId fences the previous owner's producer and aborts a transaction it left open
  (a worker killed mid-transaction), before the gained changelogs are read and the gained
  stream partitions' committed offsets are asked. Recovery replays only the gained active
  table partitions (and seeks the standbys as Faust does), then the gained stream partitions
  are sought to their committed offsets and resumed; nothing else is sought.
- *Kept partitions* keep their transactional producers and their open transactions: Faust's
  handler would stop the producers of what is revoked and begin a transaction for every
  partition assigned, kept ones included.

What makes the records of kept partitions survive the rebalance: the app's consumer generation
(``app.consumer_generation_id``, which Faust stamps on every record it fetches and against
which its streams skip records) stays as it was through an incremental rebalance (see
`transport.RebalanceListener`), and the flow control's ``resume`` does not empty the streams'
queues while the flow was never suspended (`IncrementalFlowControl`) and the rebalance is not
over. A rebalance is over when the recovery pass it asked for completes, not when an older
pass completes that a newer rebalance's handlers overtook (`IncrementalRebalance.on_recovered`).
Commits still carry the group's generation: aiokafka's coordinator sends its own.

Eager rebalances (``--rebalance-protocol eager``, and a cooperative worker while its group is
still eager) go Faust's way, untouched, and so does a cooperative join that comes while the recovery
of an eager rebalance is under way (`ready`): Faust paused every partition for that recovery,
and only its own end of it resumes them.
"""

from __future__ import annotations

import logging
from typing import Any

from faust.types import TP
from mode.utils.queues import FlowControlEvent

from streamapp.runtime.partitions_text import partitions_text as partitions_text

logger = logging.getLogger(__name__)


def incremental_join(app: Any) -> bool:
    """Whether the rebalance under way is a cooperative join this worker kept its partitions
    through and handles incrementally (set by the coordinator between the join's completion
    and its assignment step; see `ready`)."""
    return bool(getattr(app.assignor, "incremental_join", False))


def ready(app: Any) -> bool:
    """Whether a cooperative join may be handled incrementally now: not while the recovery of
    an eager rebalance is under way (Faust paused every partition for it, and resumes and
    seeks them when it ends, which an incremental join would never do)."""
    return not handler(app).eager_pending


class IncrementalFlowControl(FlowControlEvent):
    """Faust's flow control, whose ``resume`` leaves the streams' queues alone while the flow
    was not suspended and an incremental rebalance is being handled.

    Faust's ``resume`` empties every stream queue created ``clear_on_resume``, suspended or not,
    and its recovery calls it several times: after an eager revocation that drops records of
    the old assignment, but in an incremental rebalance the queues hold records of partitions
    that keep flowing, and dropping them loses them (tracked, never acked: their partition's
    commits stop there).
    """

    keep_queues = False

    def resume(self) -> None:
        if self.keep_queues and self.is_active():
            return
        super().resume()


class IncrementalRebalance:
    """The incremental handlers of one app (see the module docs)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        #: Stream partitions gained and held paused until their tables have recovered.
        self.held: set[TP] = set()
        #: An eager rebalance was handled (Faust's way) and its recovery has not ended yet.
        self.eager_pending = False
        #: An incremental rebalance with nothing to recover ends when Faust's consumer returns
        #: from the assignment step (`on_rebalance_return`).
        self.end_on_return = False
        #: Incremental handler steps begun: a recovery completion that sees it changed since
        #: its pass was asked for belongs to an older rebalance (`on_recovered`).
        self.steps = 0
        #: ``steps`` when recovery was last asked for a pass (`pass_requested`), and the
        #: partitions held then: those that pass recovers.
        self.pass_step = 0
        self.pass_held: set[TP] = set()

    def _flow_control(self) -> IncrementalFlowControl | None:
        flow = self.app.flow_control
        return flow if isinstance(flow, IncrementalFlowControl) else None

    def keep_queues(self, keep: bool) -> None:
        flow = self._flow_control()
        if flow is not None:
            flow.keep_queues = keep

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        """What this worker lost (often nothing); the consumer has committed it already."""
        app = self.app
        self.steps += 1
        self.keep_queues(True)
        if revoked:
            logger.info(
                "streamapp: giving up %s, processing the rest on (incremental rebalance)",
                partitions_text(revoked),
            )
            # Writes their table buffers; the changelog queue is left alone: it holds records
            # of the standbys kept, and those of the revoked partitions are dropped as
            # recovery takes them (no longer active nor standby here).
            app.tables.recovery.revoke_incrementally(revoked)
            if app.in_transaction:
                # Their transactions were committed and ended as the consumer gave them up:
                # their producers go before their next owner starts its own.
                await app.consumer.transactions.on_rebalance(set(), revoked, set())
                logger.info(
                    "streamapp: transactional producers stopped for %s (exactly_once; the "
                    "partitions kept keep theirs)",
                    partitions_text(revoked),
                )
        self.held -= revoked
        await app.on_partitions_revoked.send(revoked)

    async def on_partitions_assigned(
        self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP]
    ) -> None:
        """The whole new assignment; ``revoked`` and ``newly_assigned`` against the last one."""
        app = self.app
        self.steps += 1
        self.keep_queues(True)
        self.end_on_return = False
        consumer = app.consumer
        changelogs = app.tables.changelog_topics
        gained_streams = {tp for tp in newly_assigned if tp.topic not in changelogs}
        self.held = (self.held | gained_streams) & assigned
        await app.agents.on_rebalance(revoked, newly_assigned)
        await app.topics.maybe_wait_for_subscriptions()
        if newly_assigned:
            # Only what is new waits: its tables recover first (changelogs: recovery seeks
            # and resumes those it reads).
            consumer.pause_partitions(newly_assigned)
        await app.topics.on_partitions_assigned(assigned)
        if app.in_transaction and newly_assigned:
            # Before any of their records or changelog records is read (see the module docs).
            await app.consumer.transactions.on_rebalance(newly_assigned, set(), newly_assigned)
            logger.info(
                "streamapp: transactional producers started for %s (exactly_once; previous "
                "owners fenced)",
                partitions_text(newly_assigned),
            )
        logger.info(
            "streamapp: incremental rebalance: kept %d partition(s) flowing, gained %s, lost %s",
            len(assigned - newly_assigned),
            partitions_text(newly_assigned),
            partitions_text(revoked),
        )
        logger.debug("streamapp: incremental rebalance: assignment %s", sorted(assigned))
        await app.tables.on_rebalance(assigned, revoked, newly_assigned, app.consumer_generation_id)
        await app.on_partitions_assigned.send(assigned)
        if not app.tables.recovery.incremental_pass:
            # Nothing to read afresh: done now, but the rebalance ends (`end`) only after
            # Faust's consumer marked its return from this step.
            await self.on_recovered(end=False)
            self.end_on_return = True

    def pass_requested(self) -> None:
        """Recovery was asked for a pass by the rebalance whose handlers run now."""
        self.pass_step = self.steps
        self.pass_held = set(self.held)

    async def on_recovered(self, end: bool = True) -> None:
        """Recovery of what was gained is over (or there was nothing to recover): the gained
        stream partitions go to their committed offsets and resume; nothing else moves.

        ``end``: a recovery pass completed (not the handler's own call when nothing was to
        read), and the rebalance ends here unless the handlers of a newer one have begun
        since the pass was asked for (the pass was overtaken): its end is that one's."""
        app = self.app
        consumer = app.consumer
        # Noted now: a newer pass asked for under the awaits below moves them on.
        step, pass_held = self.pass_step, self.pass_held
        await app.on_rebalance_complete.send()
        held = self.held & consumer.assignment()
        if end and self.steps != step:
            # Only what this pass recovered: partitions the newer rebalance gained wait for
            # their own tables.
            held &= pass_held
        if held:
            await consumer.seek_to_committed_partitions(held)
            consumer.resume_partitions(held)
        # Forgotten only once resumed: recovery runs this inside its wait for the next
        # rebalance, which cancels it at the seek's await when that rebalance begins (the seek
        # waits on the group coordinator, busy with the join). Cleared before the seek, they
        # stayed paused for good: the next pass had nothing left to resume ("resumed nothing
        # new"), and a gained stream partition was never processed.
        self.held -= held
        resumed = partitions_text(held) if held else "nothing new"
        if end and self.steps != step:
            logger.info(
                "streamapp: recovery of an earlier rebalance done, resumed %s; the rebalance "
                "under way ends with its own",
                resumed,
            )
            # The next rebalance's handlers began after this pass was asked for (before this
            # completion, or during its seek), and its recovery signal had not been sent yet
            # (its table steps, which open and close stores, were still under way), so nothing
            # cancelled this completion: that rebalance ends when its own pass does. Ended
            # here, the queues were no longer kept, and the next pass's flow-control resume
            # emptied those of the partitions kept flowing: their records there were never
            # processed, and as the position had passed them and the hand-out ledger had
            # counted them, never fetched again either, so every later commit of their
            # partitions stopped at the first of them (the upgrade test's w3, offset 2487 of
            # a partition it had just resumed; the cooperative demo's worker-1, which
            # processed on and never committed again after two overlapping rebalances).
            return
        logger.info("streamapp: incremental rebalance done, resumed %s", resumed)
        if end:
            self.end()

    def end(self) -> None:
        """The rebalance is over (Faust's tail of a recovery's end)."""
        self.end_on_return = False
        self.app.consumer.resume_flow()
        self.keep_queues(False)
        self.app.tables.on_actives_ready()
        self.app.tables.on_standbys_ready()
        self.app.on_rebalance_end()

    def on_rebalance_return(self) -> None:
        """Faust's consumer returned from the assignment step (after the app's sensors took
        that return): a rebalance that had nothing to recover ends now, in that order (ended
        before, the sensors had no state left for the return and Faust warned of it)."""
        if self.end_on_return:
            self.end()


def handler(app: Any) -> IncrementalRebalance:
    """The app's incremental handlers (one per app)."""
    found: IncrementalRebalance | None = getattr(app, "streamapp_incremental", None)
    if found is None:
        found = IncrementalRebalance(app)
        app.streamapp_incremental = found
    return found
