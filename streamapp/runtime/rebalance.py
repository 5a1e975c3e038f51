"""A worker's side of a rebalance, step by step with the fetch loop.

aiokafka's group coordinator calls the listener (`RebalanceListener`) as a rebalance takes
partitions away and as it hands the new assignment out. The listener queues each step for the
fetch loop and waits for it (`commands.Commands`), so a step never interleaves with a round of
the loop: no record of a partition being given up is handed out after its last commit, and no
record of a partition just gained before its tables are recovered and it is sought.

The same steps serve both protocols. Under the cooperative protocol a rebalance takes away only
what moves, and everything else keeps flowing through it; under the eager protocol it takes
away everything and gives back the new assignment, so everything goes through the same steps:

- *given up* (`Rebalance.revoke`): its records are no longer handed out; those handed out
  already are processed (a timeout of the session's length bounds the wait); what was processed
  is committed (under exactly_once its transactions end and its producers stop); its tables'
  partitions are released.
- *gained* (`Rebalance.assign`): held, not fetched; under exactly_once its producers start
  first (fencing a previous owner's, aborting a transaction it left open); its tables recover
  (`tables.TableManager`); then it is sought to its committed offset (or where
  ``auto_offset_reset`` says when nothing is committed) and released (`Rebalance.release`).
- *kept*: nothing happens to it.

The app's consumer generation (which Faust's streams compare each record's with, skipping
older ones) changes only when everything was given up: records of kept partitions, queued in
the streams, stay valid through a cooperative rebalance.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aiokafka import ConsumerRebalanceListener
from faust.types import TP

from streamapp.runtime import clients
from streamapp.runtime.partitions_text import partitions_text

if TYPE_CHECKING:
    from streamapp.runtime.consumer import Consumer

logger = logging.getLogger(__name__)


def _tps(partitions: Iterable[Any]) -> set[TP]:
    return {TP(tp.topic, tp.partition) for tp in partitions}


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka's callbacks, each queued as a step of the fetch loop."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.rebalance = consumer.rebalance

    async def on_partitions_revoked(self, revoked: Iterable[Any]) -> None:
        consumer = self.consumer
        consumer.app.on_rebalance_start()
        tps = _tps(revoked)
        await consumer.commands.run(lambda: self.rebalance.revoke(tps))

    async def on_partitions_assigned(self, assigned: Iterable[Any]) -> None:
        consumer = self.consumer
        tps = _tps(assigned)
        client = consumer.fetch_loop.client
        generation = clients.generation(client) if client is not None else -1
        await consumer.commands.run(lambda: self.rebalance.assign(tps, generation))


class Rebalance:
    """The steps (see the module)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.app = consumer.app
        #: Partitions given up since the last assignment (Faust's agents learn them with it).
        self.revoked_since: set[TP] = set()
        #: True once everything was given up (an eager rebalance, or a member whose generation
        #: was reset): the next assignment starts a new consumer generation.
        self.everything_revoked = True
        #: Gained stream partitions waiting for their tables' recovery.
        self.waiting: set[TP] = set()
        #: The last assignment followed a revocation of everything (or was the first).
        self.fresh_start = True

    async def revoke(self, revoked: set[TP]) -> None:
        consumer = self.consumer
        app = self.app
        held = revoked & consumer.assigned
        if held and held == consumer.assigned:
            self.everything_revoked = True
        if not held:
            await app.on_partitions_revoked.send(revoked)
            return
        streams = {tp for tp in held if not consumer.is_changelog(tp)}
        if not self.everything_revoked:
            logger.info(
                "streamapp: giving up %s, processing the rest on (incremental rebalance)",
                partitions_text(held),
            )
        consumer.giving_up |= streams
        if streams:
            done = await consumer.wait_for_acks(
                lambda: consumer.ledger.pending(streams) == 0, app.conf.broker_session_timeout
            )
            if not done:
                logger.warning(
                    "streamapp: records of %s handed out were not all processed within the "
                    "session timeout; committing what was",
                    partitions_text(streams),
                )
            committer = consumer.fetch_loop.committer
            await committer.wait_in_flight()
            if consumer.in_transaction:
                await committer.commit_between_records(streams, start_new_transaction=False)
                await consumer.transactions.on_rebalance(set(), streams, set())
                logger.info(
                    "streamapp: transactional producers stopped for %s (exactly_once; the "
                    "partitions kept keep theirs)",
                    partitions_text(streams),
                )
            else:
                await committer.commit_processed(streams)
        app.tables.on_revoked_after_commit(held)  # type: ignore[attr-defined]
        consumer.ledger.forget(streams)
        consumer.giving_up -= streams
        consumer.assigned -= held
        consumer.held -= held
        consumer.paused -= held
        consumer.buffer_full -= held
        self.waiting -= held
        self.revoked_since |= held
        await app.on_partitions_revoked.send(held)

    async def assign(self, assigned: set[TP], generation: int) -> None:
        consumer = self.consumer
        app = self.app
        lost = consumer.assigned - assigned
        if lost:  # not announced as revoked first (a reset generation): give them up now
            await self.revoke(lost)
        gained = assigned - consumer.assigned
        revoked, self.revoked_since = self.revoked_since, set()
        self.fresh_start = self.everything_revoked
        if self.everything_revoked:
            app.consumer_generation_id = generation
            self.everything_revoked = False
        else:
            logger.info(
                "streamapp: incremental rebalance: kept %d partition(s) flowing, gained %s, "
                "lost %s",
                len(consumer.assigned & assigned),
                partitions_text(gained),
                partitions_text(revoked),
            )
        consumer.assigned = set(assigned)
        gained_streams = {tp for tp in gained if not consumer.is_changelog(tp)}
        consumer.held |= gained_streams
        self.waiting |= gained_streams
        await app.agents.on_rebalance(revoked, gained)
        await app.topics.maybe_wait_for_subscriptions()
        await app.topics.on_partitions_assigned(assigned)
        if consumer.in_transaction and gained_streams:
            await consumer.transactions.on_rebalance(gained_streams, set(), gained_streams)
            if not self.fresh_start:
                logger.info(
                    "streamapp: transactional producers started for %s (exactly_once; previous "
                    "owners fenced)",
                    partitions_text(gained_streams),
                )
        await app.tables.on_rebalance(assigned, revoked, gained, generation)
        await app.on_partitions_assigned.send(assigned)
        app.on_rebalance_return()

    async def release(self) -> None:
        """The tables of the last assignment are recovered: seek the gained stream partitions
        to their committed offsets and let their records out (the table manager calls this
        in the fetch loop's task)."""
        consumer = self.consumer
        waiting = self.waiting & consumer.assigned
        self.waiting = set()
        if waiting:
            await consumer.fetch_loop.seek_to_committed(waiting)
        consumer.held -= waiting
        if not self.app.flow_control.is_active():
            self.app.flow_control.resume()
        consumer.flow_active = True
        if self.app.rebalancing:
            self.app.on_rebalance_end()
        if self.fresh_start:
            logger.info("Worker ready")
        else:
            logger.info(
                "streamapp: incremental rebalance done, resumed %s", partitions_text(waiting)
            )
