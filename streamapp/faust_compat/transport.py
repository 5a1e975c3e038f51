"""Faust's aiokafka transport, with the fixes streamapp depends on.

1. The worker's consumer always runs our assignor. Faust's
   ``AIOKafkaConsumerThread._create_worker_consumer`` hands aiokafka the app's assignor only when
   the app has changelog tables or standby replicas, and aiokafka's round robin otherwise. A
   streamapp group must speak one protocol whatever each app defines (a worker with round robin
   would be refused by the group, or would ignore co-partitioning and stickiness), so the
   worker's consumer, streamapp's own, is built with the app's assignor always
   (`streamapp.faust_compat.worker_clients`).
   Test: tests/unit/streamapp/faust_compat/test_transport.py.

2. Highwaters under exactly_once come from the broker. Faust reads them from
   ``last_stable_offset``, which aiokafka only learns from a fetch response and reports as -1
   before one; table recovery then takes -1 for the end of a changelog it has not fetched yet
   and fails its consistency check. A ListOffsets request made by a read_committed consumer
   (Faust's consumer is one under exactly_once) answers with the last stable offset itself.
   Delete when Faust reads highwaters with ListOffsets, or aiokafka knows the LSO before a
   fetch. Test: tests/integration/test_recovery_end.py (a worker with no state, exactly_once).

3. Under exactly_once a commit happens between records only (see `Consumer`).
   Delete when Faust's exactly_once commit waits for the records it handed out and flushes the
   table buffer. Test: tests/integration/test_adclick_demo.py (exactly_once, 0 duplicated).

4. After a rebalance, a stream partition with nothing committed goes back to where
   ``auto_offset_reset`` says, as a partition with a committed offset goes back to it (see
   ``ConsumerThread._seek_to_committed_or_reset``): aiokafka left it where records fetched and
   then dropped by the rebalance had taken it, and those records were never processed.
   Delete when aiokafka's ``seek_to_committed`` resets partitions that have no committed
   offset. Test: tests/integration/test_seek_without_commit.py.

5. Stream partitions resume after the seek to their committed offsets and after the flow
   resumed, not before (see ``Consumer.resume_partitions``, ``release_streams_after_seek``);
   within one generation a stream record is handed to the streams once (see
   ``streamapp.hand_out``): a record fetched again is dropped instead of processed twice. Only
   recovery's seek counts, never the fetch loop's. Delete when Faust's recovery seeks the
   stream partitions before it resumes them, and resumes them after its flow.
   Tests: tests/unit/streamapp/test_hand_out.py; tests/integration/test_recovery_end.py.

6. A changelog record fetched under a previous generation is dropped, not handed to table
   recovery (see ``streamapp.faust_compat.recovery``). Delete when Faust's recovery asks
   which generation fetched a record. Test: tests/integration/test_rolling_restart_state.py.

7. Records fetched for a partition that is not active when they arrive are not dropped while
   aiokafka's position passes them: the partition goes back to the first of them (see
   ``Consumer._getmany``), if it is still assigned (``ConsumerThread.seek_back``): one given up
   while its records were on their way (an incremental rebalance) has no position to go back
   to, aiokafka's seek raised IllegalStateError and the fetch loop crashed the worker; one
   released while the seek waited for its new position is left, the others sought again. And
   only if nothing sought it since those records were fetched (its position is still where they
   left it): a rebalance's recovery that sought it meanwhile, from its store's offset, decides
   where it reads on; sought back past that seek, a newcomer's global table skipped the records
   in between for good. Delete when Faust's getmany hands aiokafka the partitions it will keep
   records of. Tests: tests/unit/streamapp/test_hand_out.py;
   tests/integration/test_rebalance_during_recovery.py.

8. Faust's livelock check skips a partition that has no position yet (awaiting an offset
   reset) instead of crashing the worker on aiokafka's assertion (see
   ``ConsumerThread.verify_event_path``). Delete when Faust's livelock check reads positions
   only where there is one. Test: tests/unit/streamapp/faust_compat/test_livelock_check.py.

9. A revocation commits what was processed (at-least-once too; see
   ``Consumer.on_partitions_revoked``): Faust forgot it, and the next owner processed it again.
   Delete when Faust commits acked offsets before it forgets revoked partitions (or with the
   cooperative protocol, for what is revoked). Test: tests/integration/test_revocation_commits.py.

10. The fetch loop counts the fetches it begins (``Consumer.fetches_started``): one that begins
    has handed every record of the one before to its queue, which is how table recovery knows
    that what aiokafka's position has passed has reached the changelog queue (see
    ``streamapp.faust_compat.recovery``). Delete with recovery's end-offset probe, when
    Faust's recovery ends on the consumer's position. Test: tests/integration/test_recovery_end.py.

11. A gap in a partition's offsets no longer holds its commits back (``Consumer._add_gap``):
    Faust's fetch loop records the gap including the record after it. Delete when Faust
    records ``offset_to - 1``: under a Faust fix this one would leave an offset out of the gap
    and hold commits back at it (the pinned-version check at import stops that).
    Test: tests/unit/streamapp/faust_compat/test_commit_gaps.py.

12. A stream partition whose committed offset lies below its log start (records deleted by
    retention or DeleteRecords before this group read them) is named in a WARNING at the seek
    after a rebalance: aiokafka resets it to the log start with an INFO line only, and the
    records in between were lost to the group without a word (see `deleted_before_read`).
    Records deleted after the seek, before the fetch reaches them, still pass with aiokafka's
    INFO line only. Test: tests/unit/streamapp/faust_compat/test_transport.py.

13. In an incremental rebalance (the cooperative protocol, `streamapp.faust_compat.incremental`)
    the app's consumer generation stays (``RebalanceListener``): Faust's streams skip records
    stamped with an older one, which would skip the queued records of partitions that keep
    flowing. Lost stream partitions are drained and committed alone (``Consumer._give_up``),
    gained ones sought alone (``Consumer.seek_to_committed_partitions``). Under exactly_once
    that commit also ends the lost partitions' transactions (no new one begins on producers
    about to stop); `incremental` stops their producers, and starts the gained ones' (fencing
    their previous owners) before their tables recover. Delete when Faust's rebalance handling
    is incremental. Tests: tests/integration/test_cooperative_rebalance.py;
    tests/integration/test_cooperative_crash.py (exactly_once, and a SIGKILL between rounds);
    tests/unit/streamapp/faust_compat/test_incremental.py.

14. Offsets are asked on their own connection (`ConsumerThread.offsets_reader`): a second
    aiokafka consumer, in no group, at the worker consumer's isolation level, answers
    ``highwaters`` and ``earliest_offsets``. Faust asked them of its worker consumer, whose one
    connection to a broker also carries its fetches; the broker answers one request of a
    connection at a time, and Faust's fetches wait up to 1.5 s for records (its
    ``fetch_max_wait_ms``), so each ListOffsets of a recovery (the actives' ends and starts,
    the standbys' ends and starts) queued behind an idle fetch: about 6 s of a 9 s resume after
    an exactly_once crash. A topic the reader finds unknown is said once, not at each of
    aiokafka's retries, and the worker consumer's metadata is refreshed as it goes and comes
    back (`streamapp.faust_compat.unknown_topics`). Delete when Faust asks offsets on a
    connection of their own, or aiokafka does. Test:
    tests/unit/streamapp/faust_compat/test_transport.py, test_unknown_topics.py;
    tests/integration/test_recovery_end.py, test_changelog_deleted.py.

15. The fetch loop hands a record to the streams without a task per record, when the hand-out
    has nothing to wait for (``Consumer.wait_first``; see
    ``streamapp.faust_compat.eager_hand_out``, which says when to delete it). Records of a topic
    an agent reads in batches (`streamapp.batches`, ``Consumer.hand_out_in_batches``) go
    without the yield after each, so the agent finds a fetch's records queued.

16. While a rebalance's recovery is under way, a fetch that finds no records returns after
    ``RECOVERY_FETCH_MAX_WAIT_MS`` (0.1 s), not Faust's hard-coded 1.5 s (its
    ``fetch_max_wait_ms``); the 1.5 s comes back as recovery completes
    (`ConsumerThread.shorten_fetch_wait`, ``restore_fetch_wait``). aiokafka sends one fetch at a
    time to a broker, so the first changelog fetch after recovery's seek waited for the fetch
    in flight (the stream partitions', idle) to come back empty: about a second of every
    exactly_once resume. aiokafka reads the wait as it builds each fetch request; idle workers
    keep the long wait. Delete when Faust's fetch max wait is a setting (or aiokafka's fetch in
    flight gives way to a seek). Test: tests/unit/streamapp/faust_compat/test_transport.py;
    tests/integration/test_recovery_end.py.

17. The consumer thread notes, as each of the fetch loop's fetches begins there, the positions
    of the partitions recovery watches (``Consumer.positions_at_fetch_start``): every record
    below them was returned by an earlier fetch, so has been handed out. A replay's end is
    then taken as soon as such a position reaches the end offset, where fix 10 waited for the
    fetch loop to begin a further fetch (up to 1 s, its wait for records). Delete with fix 10.
    Test: tests/unit/streamapp/faust_compat/test_transport.py;
    tests/integration/test_recovery_end.py.

18. A partition Faust set aside because its queue was full (``_buffered_partitions``: no more
    fetches until the queue drains, then ``on_buffer_drop`` makes it active again, and its
    records already fetched are handed out meanwhile) is set aside no longer once it is paused
    or revoked (see ``Consumer.pause_partitions``). Faust kept it there: as the queue drained,
    a partition paused since was made active again, and its fetched records went out past the
    pause. Under the cooperative protocol, where nothing else resets that set, this let a
    changelog partition recovery had paused after replaying it (an active table's: its own
    writes then came back and were written over newer values, recovery's path 2) or a gained
    stream partition held for its table's recovery (processed against a store not recovered
    yet) read on, and handed out records of partitions given up (to the previous owner's
    table, after the give-up's commit; or to Faust's ``highwater``, which asserts the
    partition is assigned and crashed the fetcher). Delete when Faust's pause and revocation
    clear a partition's buffered state. Test: tests/unit/streamapp/faust_compat/test_transport.py.

19. A fetch request built while records of some partitions are still waiting to be handed out
    waits at most ``PENDING_FETCH_MAX_WAIT_MS`` (0.1 s) for records, not Faust's 1.5 s
    (`wait_less_while_records_pending`). aiokafka leaves a partition whose fetched records
    the app has not taken yet out of the next fetch request, and sends that request anyway
    once its prefetch backoff (0.1 s) is over; it keeps one fetch in flight per broker. When
    the partitions left in the request were idle (the events topic between bursts, standby
    changelogs, the active tables' changelogs), the broker held it the full 1.5 s, and the
    partitions left out, busy ones, could not be fetched again until it came back: on a busy
    worker, whose fetch loop is often 0.1 s behind, every partition went without records
    about 1.5 s at a time, in steady state as in a rebalance (the "stopped" column of
    ``bench/rebalance.py``, docs/performance.md). A request that holds every fetchable
    partition keeps the long wait: new records on any of them answer it at once. Delete when
    aiokafka sends the partitions with records pending in the next request, or Faust's fetch
    max wait is a setting. Test: tests/unit/streamapp/faust_compat/test_transport.py.

20. A commit the broker refused (at-least-once) is tried again at the next commit
    (``Consumer._commit_offsets``, ``_filter_committable_offsets``, `note_commit_outcome`).
    Faust takes the offsets it commits out of its acked offsets and notes them as committed
    whether the commit went through or not, so a refused commit was never sent again: the
    partition's committed offset stayed behind until a later record was processed on it.
    Under the cooperative protocol a worker processes on through every join, and the commits
    it sends meanwhile under the old generation are refused (``IllegalGenerationError``, see
    `streamapp.runtime.group.commit_generation`); a partition whose last records were processed then
    kept a committed offset behind them for good (processed again by its next owner;
    ``bench/rebalance.py`` once waited five minutes for "events not all consumed" after
    loading its table). A refused offset of a partition revoked since is dropped, never sent
    by its former owner; under exactly_once nothing changes (what a transaction that did not
    commit covered is processed again). Delete when Faust notes an offset as committed only
    once its commit succeeded. Test: tests/unit/streamapp/faust_compat/test_commit_gaps.py.

21. A record of a topic an agent reads in batches is handed to its stream's queue in one call
    when nothing in the hand-out would wait (``Consumer.wait_first``; see
    ``streamapp.faust_compat.batch_hand_out``, which says when to delete it): the ledger, the
    tracking and the queue put of ``hand_out_between_commits`` and the conductor, without their
    coroutines, and decoded with codecs resolved once per channel.

22. aiokafka's producer sender waits the producer's ``retry_backoff_ms`` between the metadata
    refreshes it asks for (`streamapp.runtime.producer.refresh_spacing`, which says when to
    delete it): holding a record for a partition that is gone (a changelog deleted, or recreated
    with fewer partitions) it asked again as each answer came, about 2,000 times a second.
    Tests: tests/unit/streamapp/runtime/producer/test_refresh_spacing.py;
    tests/integration/test_producer_metadata.py.

23. A record the hand-out put in a stream's queue and Faust's flow control then dropped from
    it unprocessed (the queues are cleared as a worker stops and on each resume of an eager
    rebalance) stops counting as handed out at once, never acked
    (`streamapp.faust_compat.dropped_records`, which says when to delete it; fix 27 fetches
    such records again where nothing else would). It left the consumer's weak set of unacked
    records only once garbage-collected; the fetch loop's last record, kept by ``getmany`` for
    ``wait_first``, never was: a worker stopped right after it started waited for that record
    forever. Test:
    tests/unit/streamapp/faust_compat/test_dropped_records.py.

24. The partitions a worker keeps processing are not held by its fetch loop's other work,
    in two places where that loop waited (``bench/rebalance.py``'s "stopped" column,
    docs/performance.md). A round of the loop takes the stream partitions' records
    first, then at most ``REPLICA_RECORDS_PER_ROUND`` changelog records (``ConsumerThread.
    _fetch_records``; see `streamapp.faust_compat.replica_share`, which says when to delete
    it): a replica catching up brought a thousand and more at once, and the stream records
    fetched meanwhile waited until all were handed out and applied. And at-least-once, the
    fetch loop's commit every ``broker_commit_every`` acks no longer waits, between two
    records, for a commit in flight or for its own (``Consumer._commit_beside_fetch_loop``):
    one sent during a join is answered only as the join ends. Delete the first part with
    `replica_share`, the second when Faust's fetch loop commits without waiting. Test:
    tests/unit/streamapp/faust_compat/test_replica_share.py.

25. The backlogs of gained partitions do not hold up the partitions a worker kept: a round of
    the fetch loop takes at most ``RECORDS_PER_PARTITION_PER_ROUND`` (50) records of each
    stream partition and ``RECORDS_PER_ROUND`` (100) in all, split evenly over the partitions
    with records, each round starting after the partition the last one ended at
    (``ConsumerThread._fetch_records``; see `streamapp.faust_compat.partition_share`, which
    says when to delete it). aiokafka handed out each partition's whole fetch in one round,
    and the backlog of a partition just gained or got back (several hundred records) went out
    at the agents' pace while the kept partitions' records, fetched meanwhile, waited for the
    round's end: 0.8 to 2.8 s in ``bench/rebalance.py`` (docs/performance.md); with the
    bound per partition only, a worker catching up on six partitions (a rolling restart's)
    still made rounds of 300 records, 0.4 to 1.8 s. A fetch error aiokafka holds is raised by
    a round that has taken nothing yet, before any records, else by the next round (fix 24's
    replica take could raise it after stream records were taken, and lose them). Tests:
    tests/unit/streamapp/faust_compat/test_partition_share.py, test_replica_share.py.
26. A topic the consumer's metadata does not know yet has an unknown partition count, not 0
    (``ConsumerThread.topic_partitions``). aiokafka's group coordinator lists every topic the
    group subscribes to in its metadata snapshot, with 0 for one its metadata has no
    partitions of (a changelog created a moment before the leader's metadata request); Faust's
    check of a table's changelog against its source (``Table._verify_source_topic_partitions``)
    took that for a changelog of 0 partitions and raised ``PartitionsMismatch`` on every record
    the table was written for, and recovery set aside stores "beyond 0 partitions". A topic
    always has at least one partition; the leader's metadata is refreshed until it knows the
    topic (`streamapp.left_out_topics`). Delete when aiokafka leaves unknown topics out of its
    snapshot, or Faust reads 0 as unknown. Test:
    tests/unit/streamapp/faust_compat/test_unknown_partition_count.py.

27. Records dropped from a stream's queue unprocessed while the flow runs on are processed
    after all (``Consumer.rewind_dropped``; see `streamapp.faust_compat.dropped_records`, which
    says when to delete it). Fix 23 untracks them, and only a seek to the committed offset
    fetches them again: an eager rebalance's, a restart's, the next owner's. Under the
    cooperative protocol a partition kept through a rebalance is never sought, so a clear of
    its queue (an overtaken recovery pass resuming the flow, before
    `streamapp.faust_compat.incremental` kept the queues through it) lost its dropped records
    to processing and stopped its commits at the first of them for good. Each partition the
    worker keeps is sought back to the first record dropped as the fetch loop's next round
    begins (fix 7's seek, which leaves a partition released meanwhile alone), with Faust's read
    mark; the hand-out ledger (`streamapp.hand_out`) lets the dropped records out once more, in
    offset order, and holds back every other record of the partition until they have come, so
    nothing is handed out twice or past them (under exactly_once no transaction carries output
    beyond the hole).
    A clear while the flow is suspended (a stop, an eager revocation) seeks nothing. Tests:
    tests/unit/streamapp/faust_compat/test_dropped_records.py;
    tests/unit/streamapp/test_hand_out.py; tests/integration/test_queue_clear.py.

28. A round's records of a topic an agent reads in batches are handed to its stream's queue a
    partition at a time, in one call per partition, before Faust's ``getmany`` takes the rest
    record by record (``Consumer._getmany``; see
    ``streamapp.faust_compat.partition_hand_out``, which says when to delete it): per record,
    what Faust's ``getmany`` and fetch loop do (the message, the generation check, the read
    mark) and fix 21's hand-out, without their per-record coroutines. Whatever would wait or
    is unusual leaves the rest of the partition's round to them. Test:
    tests/unit/streamapp/faust_compat/test_partition_hand_out.py.

29. A table recovery pass that a newer rebalance cut short does not resume the flow
    (``Consumer.resume_flow``). Faust's recovery catches the interruption of its wait for the
    replay's end and carries on: "Done reading", then it resumes the global tables' changelogs
    and the flow, in the middle of the newer rebalance, before that rebalance's pass has sought
    anything. The fetch loop then handed out and dropped records of positions no pass had
    chosen, and set Faust's read marks (below which it drops every record) from them after the
    new pass's seek: a newcomer's global table lost the first few hundred records of a
    changelog partition for good (tests/integration/test_rebalance_during_recovery.py). The
    newer pass resumes the flow once it has sought. Delete when Faust's recovery stops a pass
    that a rebalance interrupted. Test: tests/unit/streamapp/test_hand_out.py.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, MutableMapping
from collections.abc import Set as AbstractSet
from contextvars import ContextVar
from typing import Any, cast

import aiokafka
from aiokafka.consumer.fetcher import FetchError
from aiokafka.errors import IllegalStateError, KafkaError
from faust.exceptions import ConsumerNotStarted
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, Message
from faust.types.transports import TPorTopicSet
from mode.services import WaitResults

from streamapp.faust_compat import (
    access,
    incremental,
    partition_share,
    replica_share,
    sends,
    unknown_topics,
    worker_clients,
)
from streamapp.faust_compat.batch_hand_out import BatchHandOut
from streamapp.faust_compat.eager_hand_out import (
    AHEAD_LIMIT,
    BATCH_AHEAD_LIMIT,
    eager_wait_first,
    is_coroutine_of,
)
from streamapp.faust_compat.partition_hand_out import PartitionHandOut
from streamapp.hand_out import HandOutLedger
from streamapp.runtime.group.consumer import WorkerConsumer

logger = logging.getLogger(__name__)

#: aiokafka's wait for records of a fetch while a recovery is under way (fix 16); Faust's, the
#: wait otherwise, is 1.5 s.
RECOVERY_FETCH_MAX_WAIT_MS = 100

#: aiokafka's wait for records of a fetch built while records of other partitions are still
#: waiting to be handed out (fix 19).
PENDING_FETCH_MAX_WAIT_MS = 100

#: True in the task of Faust's fetch loop (set by `Consumer.getmany`); a context variable, so
#: the tasks recovery runs its seeks in (mode's ``wait_first`` makes new ones) never see it.
IN_FETCH_LOOP: ContextVar[bool] = ContextVar("streamapp_in_fetch_loop", default=False)


def newer_recovery_pending(app: Any) -> bool:
    """Whether a rebalance has asked for a table recovery pass that has not begun yet (Faust's
    ``signal_recovery_start``, which its recovery loop clears as the pass begins): any pass
    still running is one that rebalance overtook."""
    return bool(app.tables.recovery.signal_recovery_start.is_set())


def aiokafka_position(consumer: aiokafka.AIOKafkaConsumer, tp: Any) -> int | None:
    """aiokafka's position of ``tp``: the offset after the last record it returned (and the
    transaction markers and aborted records it passed); None: not assigned, or no position
    yet (newly assigned, awaiting its offset reset).

    aiokafka private: ``_subscription``. Positions change only in the consumer thread (as a
    fetch returns records, by seeks and offset resets), so a read there is exact; a read from
    the app's thread (recovery's probe) sees the last one made.
    """
    subscription = consumer._subscription.subscription
    if subscription is None:
        return None
    state = subscription.assignment.state_value(aiokafka.TopicPartition(tp.topic, tp.partition))
    if state is None or not state.has_valid_position:
        return None
    position: int = state.position
    return position


def deleted_before_read(
    committed: Mapping[Any, int | None], log_starts: Mapping[Any, int]
) -> dict[Any, tuple[int, int]]:
    """Partitions whose committed offset lies below their log start: ``tp -> (committed, start)``.

    The records from the committed offset up to the log start were deleted (time or size
    retention, DeleteRecords) before the group read them; aiokafka's fetch resets the position
    to the log start, so no worker of the group ever processes them.
    """
    lost: dict[Any, tuple[int, int]] = {}
    for tp, offset in committed.items():
        start = log_starts.get(tp)
        if offset is not None and offset >= 0 and start is not None and offset < start:
            lost[tp] = (offset, start)
    return lost


def wait_less_while_records_pending(fetcher: Any) -> None:
    """Shorten the fetch requests ``fetcher`` (aiokafka's) builds while records it fetched are
    still waiting to be handed out (fix 19). Idempotent.

    Wraps the fetcher's own ``_get_actions_per_node`` (instance attribute, so only this
    consumer's fetcher): aiokafka builds every request there, from the partitions that have
    no records pending, and reads its wait from ``_fetch_max_wait_ms`` (fix 16 shortens that
    during a recovery; this only lowers it further).
    """
    if getattr(fetcher, "_streamapp_pending_wait", False):
        return
    build = fetcher._get_actions_per_node

    def get_actions_per_node(assignment: Any) -> Any:
        actions = build(assignment)
        if fetcher._records:
            # Partitions left out for their pending records need a fetch as soon as the app
            # takes them: the request in flight must not hold them up.
            for _node_id, request in actions[0]:
                request._max_wait_ms = min(request._max_wait_ms, PENDING_FETCH_MAX_WAIT_MS)
        return actions

    fetcher._get_actions_per_node = get_actions_per_node
    fetcher._streamapp_pending_wait = True


def note_commit_outcome(
    committed_offsets: MutableMapping[TP, int | None],
    refused: dict[TP, int],
    before: Mapping[TP, int | None],
    sent: Mapping[TP, int],
    *,
    committed: bool,
) -> None:
    """After Faust's commit of ``sent`` (fix 20): a commit that went through settles what was
    refused before it; a refused one puts the committed offsets back to what they were
    ``before`` it (Faust noted ``sent`` as committed) and keeps ``sent`` in ``refused``, to be
    sent again."""
    for tp, offset in sent.items():
        if committed:
            if refused.get(tp, offset) <= offset:
                refused.pop(tp, None)
            continue
        if committed_offsets.get(tp) == offset:
            committed_offsets[tp] = before.get(tp)
        refused[tp] = max(offset, refused.get(tp, offset))


def offsets_reader(app: Any, transport: Any, *, read_committed: bool) -> aiokafka.AIOKafkaConsumer:
    """A consumer in no group, for ListOffsets only: the worker consumer's broker, credentials
    and isolation level (the last stable offset is an end under read_committed), and its client
    id and log (streamapp's own consumer, `streamapp.faust_compat.worker_clients`)."""
    conf = app.conf
    reader = WorkerConsumer(
        role="offsets reader",
        client_id=worker_clients.worker_client_id(app),
        bootstrap_servers=faust_aiokafka.server_list(transport.url, transport.default_port),
        request_timeout_ms=int(conf.broker_request_timeout * 1000.0),
        enable_auto_commit=False,
        isolation_level="read_committed" if read_committed else "read_uncommitted",
        metadata_max_age_ms=conf.consumer_metadata_max_age_ms,
        connections_max_idle_ms=conf.consumer_connections_max_idle_ms,
        **faust_aiokafka.credentials_to_aiokafka_auth(conf.broker_credentials, conf.ssl_context),
    )
    unknown_topics.quiet_metadata(reader)
    return reader


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    #: Answers highwaters and earliest_offsets (transport fix 14); started at its first use,
    #: in the consumer thread.
    _offsets_reader: aiokafka.AIOKafkaConsumer | None = None
    _offsets_reader_started: bool = False
    #: Says each topic the offsets reader finds unknown once (`unknown_topics`); made with it.
    _topic_check: unknown_topics.TopicCheck | None = None
    #: Faust's fetch max wait, which a recovery shortens (fix 16).
    _idle_fetch_max_wait_ms: int | None = None
    #: Partitions whose positions are noted as each fetch begins (fix 17).
    watched_positions: frozenset[TP] = frozenset()
    #: (the fetch loop's count of the fetch, ``tp -> position``) at the latest fetch begun.
    positions_at_fetch_start: tuple[int, Mapping[TP, int]] = (-1, {})
    #: Where this consumer's rounds of stream and replica records last ended (fix 25); made at
    #: its first fetch.
    _rotation: partition_share.Rotation | None = None
    #: Per partition, aiokafka's position right after the latest fetch took records of it
    #: (made afresh as each fetch begins; fix 7).
    positions_after_fetch: Mapping[TP, int] = {}

    async def seek_back(
        self, partitions: Mapping[TP, int], taken_to: Mapping[TP, int] | None = None
    ) -> None:
        """``partitions`` back to these offsets, those still assigned only (transport fix 7).

        With ``taken_to`` (`positions_after_fetch` of the fetch that returned the records),
        only the partitions still at the position that fetch left them at: a partition sought
        since stays where that seek put it."""
        await self.call_thread(self._seek_back_assigned, partitions, taken_to)

    async def _seek_back_assigned(
        self, partitions: Mapping[TP, int], taken_to: Mapping[TP, int] | None = None
    ) -> None:
        # In the consumer thread, where rebalances and every seek run too: nothing is given up
        # or sought between the checks and the seek. A partition given up has no position; its
        # records go nowhere.
        consumer = self._ensure_consumer()
        assigned = consumer.assignment()
        still = {tp: offset for tp, offset in partitions.items() if tp in assigned}
        if taken_to is not None:
            for tp, offset in list(still.items()):
                position = aiokafka_position(consumer, tp)
                if position != taken_to.get(tp):
                    # Sought since the fetch (a rebalance's recovery, from its store's offset):
                    # that seek decides where it reads on. Sought back over it, the records
                    # between its offset and these were never fetched (a newcomer's global
                    # table lacked a block of them for good, its offset at the end).
                    del still[tp]
                    logger.info(
                        "streamapp: %s[%d]: records fetched from %d were not handed out, but "
                        "the partition was sought to %s since: it reads on from there",
                        tp.topic,
                        tp.partition,
                        offset,
                        position,
                    )
        if not still:
            return
        try:
            await self._seek_wait(consumer, still)
        except IllegalStateError:
            # Given up while the seek waited for the new positions (a cooperative rebalance
            # released it meanwhile): aiokafka's position raised for it and the fetch loop
            # crashed. It has nothing to go back to; the others are sought again.
            assigned = consumer.assignment()
            left = {tp: offset for tp, offset in still.items() if tp in assigned}
            if len(left) == len(still):
                raise
            await self._seek_back_assigned(left)

    def topic_partitions(self, topic: str) -> int | None:
        """The topic's partition count in the group's metadata, None if unknown (fix 26)."""
        count = super().topic_partitions(topic)
        return count or None

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        # streamapp's own consumer, with the app's assignor always (fix 1), static membership
        # and streamapp's group protocol (`streamapp.faust_compat.worker_clients`).
        read_committed = bool(self.consumer.in_transaction)
        consumer = worker_clients.worker_consumer(
            self.app, transport, read_committed=read_committed
        )
        self._offsets_reader = offsets_reader(self.app, transport, read_committed=read_committed)
        self._topic_check = unknown_topics.TopicCheck(
            unknown_topics.UnknownTopics(reported_elsewhere=self._watched_changelog),
            refresh_worker_metadata=lambda: access.refresh_worker_metadata(self.app),
        )
        return consumer

    def _fetcher(self) -> Any:
        # aiokafka private: the consumer's Fetcher, which reads _fetch_max_wait_ms as it
        # builds each fetch request (in this thread's loop).
        consumer = self._consumer
        return None if consumer is None else getattr(consumer, "_fetcher", None)

    def _idle_fetch_wait(self, fetcher: Any) -> int:
        # Faust's, read once, before either method below changed it: both only write, so
        # calls from the two threads (an assignment here, a recovery's end in the app's) never
        # leave the short wait for good.
        if self._idle_fetch_max_wait_ms is None:
            self._idle_fetch_max_wait_ms = int(fetcher._fetch_max_wait_ms)
        return self._idle_fetch_max_wait_ms

    def shorten_fetch_wait(self) -> None:
        """A recovery is under way: fetches that find nothing return after 0.1 s (fix 16)."""
        fetcher = self._fetcher()
        if fetcher is not None:
            idle = self._idle_fetch_wait(fetcher)
            fetcher._fetch_max_wait_ms = min(RECOVERY_FETCH_MAX_WAIT_MS, idle)

    def restore_fetch_wait(self) -> None:
        """Recovery completed: fetches wait as long as Faust set them to (fix 16)."""
        fetcher = self._fetcher()
        if fetcher is not None:
            fetcher._fetch_max_wait_ms = self._idle_fetch_wait(fetcher)

    async def _fetch_records(
        self,
        consumer: aiokafka.AIOKafkaConsumer,
        active_partitions: set[TP],
        timeout: float | None = None,
        max_records: int | None = None,
    ) -> Any:
        # Runs in this thread as each fetch of Faust's fetch loop begins; the loop is waiting
        # for it, so its count is this fetch's, and it handed out what the fetches before
        # returned (fix 17).
        wait_less_while_records_pending(consumer._fetcher)
        watched = self.watched_positions
        if watched:
            started = getattr(self.consumer, "fetches_started", -1)
            positions: dict[TP, int] = {}
            for tp in watched:
                if (position := aiokafka_position(consumer, tp)) is not None:
                    positions[tp] = position
            self.positions_at_fetch_start = (started, positions)
        taken_to: dict[TP, int] = {}
        self.positions_after_fetch = taken_to
        changelogs = self.app.tables.changelog_topics
        replicas = {tp for tp in active_partitions if tp.topic in changelogs}
        fetch_records = super()._fetch_records
        fetcher = consumer._fetcher

        async def fetch(
            tps: AbstractSet[TP], wait: float, most: int | None
        ) -> Mapping[TP, list[Any]]:
            fetched: Mapping[TP, list[Any]] = await fetch_records(
                consumer, cast(set[TP], tps), timeout=wait, max_records=most
            )
            # Right as aiokafka returned them, before anything else runs in this thread: the
            # position these records left each partition at (fix 7).
            for tp in fetched:
                if (position := aiokafka_position(consumer, tp)) is not None:
                    taken_to[TP(tp.topic, tp.partition)] = position
            return fetched

        # aiokafka private (fixes 19 and 25): what the fetcher holds and the app has not taken
        # yet, per partition, in the order it was fetched; an error or records.
        held = fetcher._records

        def pending() -> list[tuple[TP, bool]]:
            return [
                (TP(tp.topic, tp.partition), isinstance(each, FetchError))
                for tp, each in held.items()
            ]

        def failed(tp: TP) -> bool:
            return isinstance(held.get(aiokafka.TopicPartition(tp.topic, tp.partition)), FetchError)

        if self._rotation is None:
            self._rotation = partition_share.Rotation()
        # Stream records first, at most a share of each partition's and a bound in all, then a
        # bounded share of the changelogs' (fixes 24 and 25).
        round_ = partition_share.Round(fetch, pending, failed, self._rotation)
        return await replica_share.fetch_streams_first(
            round_, active_partitions, replicas, timeout or 0, max_records
        )

    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed: Mapping[TP, int] = await self.call_thread(self._seek_to_committed_or_reset)
        return committed

    async def seek_partitions_to_committed(self, tps: set[TP]) -> Mapping[TP, int | None]:
        """Only ``tps`` to their committed offsets (or auto_offset_reset where there is none):
        the stream partitions an incremental rebalance gained (see `incremental`)."""
        committed: Mapping[TP, int | None] = await self.call_thread(
            self._seek_to_committed_or_reset, tps
        )
        return committed

    async def _seek_to_committed_or_reset(
        self, partitions: set[TP] | None = None
    ) -> Mapping[Any, int | None]:
        # Faust calls this after every rebalance (and while its flow is stopped) to take each
        # partition back to its committed offset: records fetched but not processed (a batch cut
        # short when the flow stopped, queues cleared, skipped stale events) are dropped on the
        # way, and only this seek brings them back. aiokafka seeks only where the committed
        # offset is > 0, so a stream partition without one (nothing committed yet: a new group,
        # or a revocation right after the start, since Faust forgets the acked offsets of
        # revoked partitions before it commits) kept the position the dropped records had
        # advanced, and they were never processed by anyone. Those partitions go back to where
        # a consumer without a committed offset starts (auto_offset_reset).
        consumer = self._ensure_consumer()
        # aiokafka TopicPartition -> committed offset, or None where there is none.
        committed: dict[Any, int | None] = await consumer.seek_to_committed(
            *(aiokafka.TopicPartition(tp.topic, tp.partition) for tp in sorted(partitions or ()))
        )
        changelogs = self.app.tables.changelog_topics
        acks_enabled_for = self.app.topics.acks_enabled_for
        at_zero, unset = [], []
        for tp, offset in committed.items():
            if tp.topic in changelogs or not acks_enabled_for(tp.topic):
                continue  # table recovery and standbys place changelog partitions themselves
            if offset == 0:
                at_zero.append(tp)
            elif offset is None or offset < 0:
                unset.append(tp)
        for tp in at_zero:
            consumer.seek(tp, 0)
        await self._warn_deleted_before_read(
            consumer, {tp: offset for tp, offset in committed.items() if offset is not None}
        )
        reset = self.app.conf.consumer_auto_offset_reset
        if unset and reset in ("earliest", "latest"):
            moved = {}
            for tp in unset:
                position = aiokafka_position(consumer, tp)
                if position:
                    moved[f"{tp.topic}[{tp.partition}]"] = position
            if moved:
                self.log.info(
                    "no committed offset: back to the %s offset from positions %s", reset, moved
                )
            if reset == "earliest":
                await consumer.seek_to_beginning(*unset)
            else:
                await consumer.seek_to_end(*unset)
        return committed

    async def _warn_deleted_before_read(
        self, consumer: aiokafka.AIOKafkaConsumer, committed: Mapping[Any, int]
    ) -> None:
        # aiokafka resets such a partition to its log start with one INFO line ("Fetch offset
        # ... is out of range"): records were lost to the group, and this says which.
        changelogs = self.app.tables.changelog_topics
        acks_enabled_for = self.app.topics.acks_enabled_for
        streams = {
            tp: offset
            for tp, offset in committed.items()
            if tp.topic not in changelogs and acks_enabled_for(tp.topic)
        }
        if not streams:
            return
        try:
            # Bounded: a diagnostic, never a reason to hold a rebalance up.
            starts = await asyncio.wait_for(consumer.beginning_offsets(list(streams)), 5.0)
        except (KafkaError, TimeoutError) as exc:
            logger.debug("log starts not read, no check for deleted records: %r", exc)
            return
        for tp, (offset, start) in sorted(deleted_before_read(streams, starts).items()):
            logger.warning(
                "streamapp: %s[%d]: records %d to %d were deleted (retention or DeleteRecords) "
                "before this group read them: they are not processed; the partition goes on "
                "from %d",
                tp.topic,
                tp.partition,
                offset,
                start - 1,
                start,
            )

    def _watched_changelog(self, topic: str) -> bool:
        # The changelog watch says a missing changelog of a table in one line of its own.
        from streamapp.changelog_watch import watched_changelogs

        return topic in watched_changelogs(self.app)

    async def _offsets_client(self, partitions: Collection[TP]) -> aiokafka.AIOKafkaConsumer:
        """The consumer to ask offsets of ``partitions`` (in the consumer thread): the
        offsets reader, else (not made, or it did not start) the worker consumer, as Faust
        did."""
        reader = self._offsets_reader
        if reader is None:
            return self._ensure_consumer()
        if not self._offsets_reader_started:
            try:
                await reader.start()
            except KafkaError as exc:
                logger.warning(
                    "streamapp: offsets reader did not start (%r): offsets are asked of the "
                    "worker consumer, behind its fetches",
                    exc,
                )
                self._offsets_reader = None
                return self._ensure_consumer()
            self._offsets_reader_started = True
        if self._topic_check is not None:
            await self._topic_check.before_asking(reader, partitions)
        return reader

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        # end_offsets honours the consumer's isolation level: the LSO under read_committed.
        ends = await (await self._offsets_client(partitions)).end_offsets(partitions)
        return {TP(tp.topic, tp.partition): offset for tp, offset in ends.items()}

    async def earliest_offsets(self, *partitions: TP) -> Mapping[TP, int]:
        starts: Mapping[TP, int] = await self.call_thread(self._earliest_offsets, partitions)
        return starts

    async def _earliest_offsets(self, partitions: Iterable[TP]) -> Mapping[TP, int]:
        tps = list(partitions)
        starts = await (await self._offsets_client(tps)).beginning_offsets(tps)
        return {TP(tp.topic, tp.partition): offset for tp, offset in starts.items()}

    async def on_thread_stop(self) -> None:
        # Tasks the assignor started on this thread's loop that use this consumer (the leader's
        # metadata refreshes, `streamapp.left_out_topics`) end before the consumer stops.
        stop_assignor_tasks = getattr(self.app.assignor, "on_consumer_thread_stop", None)
        if stop_assignor_tasks is not None:
            await stop_assignor_tasks()
        await super().on_thread_stop()
        reader, self._offsets_reader = self._offsets_reader, None
        if reader is not None and self._offsets_reader_started:
            await reader.stop()

    def verify_event_path(self, now: float, tp: TP) -> None:
        # Faust's livelock check reads each partition's position from aiokafka, whose
        # ``TopicPartitionState.position`` asserts there is one: a partition awaiting an offset
        # reset (newly assigned with nothing committed, or sent back to its beginning by
        # `_seek_to_committed_or_reset`) has none for a moment, and the assertion crashed the
        # worker. There is nothing to verify on such a partition yet.
        if aiokafka_position(self._ensure_consumer(), tp) is None:
            return None
        return super().verify_event_path(now, tp)


class RebalanceListener(faust_aiokafka.ConsumerRebalanceListener):
    """Faust's listener; in an incremental rebalance the app's consumer generation stays.

    Faust stamps every fetched record with ``app.consumer_generation_id`` and its streams skip a
    record stamped with another: records of the partitions kept, queued or in a fetch when the
    generation moved on, were skipped (acked unprocessed). An incremental rebalance
    (`streamapp.faust_compat.incremental`) keeps those partitions flowing, so it keeps the
    generation too; commits carry the group's generation from aiokafka's coordinator anyway.
    """

    async def on_partitions_assigned(self, assigned: Iterable[Any]) -> None:
        thread = self._thread
        app = thread.app
        # Recovery follows (fix 16). Set as the assignment is taken: the new partitions get
        # their positions (committed offsets asked for just now) before a fetch includes them.
        if isinstance(thread, ConsumerThread):
            thread.shorten_fetch_wait()
        if not incremental.incremental_join(app):
            await super().on_partitions_assigned(assigned)
            return
        tps = {TP(tp.topic, tp.partition) for tp in assigned}
        await thread.on_partitions_assigned(tps, app.consumer_generation_id)


class Consumer(faust_aiokafka.Consumer):
    """Faust's consumer; under exactly_once, a commit happens only between records.

    Faust commits from its own task while agents keep processing, and table writes reach the
    transaction through a buffer that its exactly_once commit does not flush. A transaction could
    so commit the output of a record whose offset it does not commit (processed again after a
    crash: a duplicate), or commit an offset whose table writes land in the next transaction
    (lost if that one aborts). Kafka Streams commits between records in the processing thread;
    here a commit stops handing out records, waits until every record handed out (queued for a
    stream or in an agent) is processed (acked), flushes the buffer, and only then commits. A
    revocation commits and ends the transactions before Faust forgets the revoked offsets.
    Gaps in a partition's offsets (transaction markers) no longer hold its commits back.
    """

    RebalanceListener = RebalanceListener

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handing_out = asyncio.Event()
        #: Stream partitions being given up in an incremental rebalance: none of their records
        #: is handed out any more.
        self._giving_up: set[TP] = set()
        #: The last assignment handed to Faust (what an incremental one gains is the rest).
        self._last_assigned: set[TP] = set()
        self._hand_out_ledger = HandOutLedger()
        # Stream partitions Faust's recovery resumed before the seek that must precede them.
        self._streams_await_seek = False
        self._sought_for_streams = False
        self._resume_after_seek: set[TP] = set()
        self._refusals_logged: set[tuple[TP, int]] = set()
        #: Fetches Faust's fetch loop has begun (see the module docs, 9).
        self.fetches_started = 0
        self._handing_out.set()
        self._commit_lock = asyncio.Lock()
        #: Offsets a commit sent and the broker refused, to send again (fix 20).
        self._refused_commits: dict[TP, int] = {}
        #: Kept stream partitions whose queued records were dropped unprocessed, and the first
        #: of them: sought back there as the fetch loop's next round begins (fix 27).
        self._dropped_seek_back: dict[TP, int] = {}
        hand_out = self.callback
        acks_enabled_for = self.app.topics.acks_enabled_for

        async def hand_out_between_commits(message: Message) -> None:
            await self._handing_out.wait()
            if message.tp in self._giving_up:
                return  # left to its next owner, from the offset committed as it is given up
            if acks_enabled_for(message.topic):  # a stream record (not a changelog's)
                if not self._admit(message):
                    return
                if not message.tracked:
                    # Faust's stream tracks a record only when it takes it from its queue;
                    # tracked here, records still queued count as handed out, and a commit
                    # waits for them.
                    message.tracked = True
                    self.track_message(message)
            elif message.generation_id != self.app.consumer_generation_id:
                # A changelog record fetched under the previous assignment: table recovery
                # counts what it takes without asking which generation fetched it, and seeks
                # every changelog partition it keeps afresh (see faust_compat.recovery, path 3).
                return
            await hand_out(message)

        # Faust's fetch loop hands every record to this callback (the conductor's on_message).
        self.callback = hand_out_between_commits
        self._hand_out = hand_out_between_commits
        #: Records the fetch loop handed out at once, and those that had to wait (the tests).
        self.handed_out_at_once = 0
        self.handed_out_waiting = 0
        #: Topics an agent reads in batches (`streamapp.batches`), and the topic of the record
        #: the fetch loop is handing out (noted by `getmany`).
        self.batch_topics: set[str] = set()
        self._fetched_topic: str | None = None
        self._fetched_message: Message | None = None
        self._batch_hand_out = BatchHandOut(self, self._admit, self._handing_out, self._giving_up)
        self._partition_hand_out = PartitionHandOut(
            self, self._batch_hand_out, self.batch_topics, BATCH_AHEAD_LIMIT
        )

    @property
    def handed_out_by_partition(self) -> int:
        """Records (of `handed_out_at_once`) handed out a partition at a time (fix 28)."""
        return self._partition_hand_out.handed_out

    async def wait_first(self, *coros: Any, timeout: Any = None) -> WaitResults:
        # Faust's fetch loop calls ``wait_first(callback(message), self.suspend_flow.wait())``
        # once per record: that call starts with the hand-out's first step at once, in the
        # fetch loop's task (module docs, 12). Every other call is mode's own.
        if (
            timeout is None
            and len(coros) == 2
            and is_coroutine_of(coros[0], self._hand_out)
            and IN_FETCH_LOOP.get()
        ):
            # A batch agent's record goes without a yield, so that its agent finds a fetch's
            # records in its queue, not one (eager_hand_out, BATCH_AHEAD_LIMIT).
            batched = self._fetched_topic in self.batch_topics
            may_start = not (self.suspend_flow.is_set() or self.should_stop) and len(
                self.unacked
            ) < (BATCH_AHEAD_LIMIT if batched else AHEAD_LIMIT)
            if batched and may_start and self._batch_hand_out(self._fetched_message):
                # Handed out (or refused by the ledger) in one call (batch_hand_out, fix 21):
                # the callback's coroutine and the flow's wait never ran.
                coros[0].close()
                coros[1].close()
                self.handed_out_at_once += 1
                return WaitResults([coros[0]], [None], False)
            waited = await eager_wait_first(
                coros[0],
                coros[1],
                may_start=may_start,
                wait_first=super().wait_first,
                keep_step=not batched,
            )
            if waited is not None:
                self.handed_out_waiting += 1
                return waited
            self.handed_out_at_once += 1
            return WaitResults([coros[0]], [None], False)
        return await super().wait_first(*coros, timeout=timeout)

    def resume_flow(self) -> None:
        # Not for a recovery pass a newer rebalance overtook (fix 29): that rebalance asked
        # for a pass of its own, which resumes the flow once it has sought the changelogs.
        if newer_recovery_pending(self.app):
            return
        super().resume_flow()

    def pause_partitions(self, tps: Iterable[TP]) -> None:
        # A paused partition is no longer one set aside for its full queue (fix 18): Faust's
        # on_buffer_drop would make it active again, and its getmany hands out the records of
        # a partition set aside, paused or not.
        tps = set(tps)
        self._buffered_partitions.difference_update(tps)
        super().pause_partitions(tps)

    def on_buffer_full(self, tp: TP) -> None:
        # A record of a partition paused or revoked since its fetch filled the queue: the
        # partition is not fetched now anyway, and set aside it would be handed out (fix 18).
        if tp in self._paused_partitions or tp not in self.assignment():
            return
        super().on_buffer_full(tp)

    def on_buffer_drop(self, tp: TP) -> None:
        # Only a partition still set aside (assigned, not paused since) becomes active again
        # (fix 18); Faust's resumed whatever it had set aside, paused or revoked since.
        if tp in self._buffered_partitions and (
            tp in self._paused_partitions or tp not in self.assignment()
        ):
            self._buffered_partitions.discard(tp)
            return
        super().on_buffer_drop(tp)

    def paused_streams(self) -> set[TP]:
        """The stream partitions of the assignment paused now (for the worker's view): outside
        a rebalance none is, and one that stays paused is never processed."""
        changelogs = self.app.tables.changelog_topics
        return {
            tp for tp in self._paused_partitions & self.assignment() if tp.topic not in changelogs
        }

    def hand_out_in_batches(self, topics: Iterable[str]) -> None:
        """An agent reads ``topics`` in batches (`streamapp.batches`): their records are handed
        out without a yield between them (see `eager_hand_out`)."""
        self.batch_topics.update(topics)

    def resume_partitions(self, tps: Iterable[TP]) -> None:
        # Faust's recovery resumes the stream partitions and then seeks them to their committed
        # offsets (`Recovery.on_recovery_completed`). Records the fetch loop took in between came
        # from positions the seek moves back: they were processed, fetched again after the seek
        # and processed again, their output repeated (under exactly_once too: both processings
        # can land in committed transactions). Stream partitions resume once that seek is done
        # and the flow resumed (`release_streams_after_seek`).
        tps = set(tps)
        if self._streams_await_seek:
            changelogs = self.app.tables.changelog_topics
            held = {tp for tp in tps if tp.topic not in changelogs}
            self._resume_after_seek |= held
            tps -= held
        super().resume_partitions(tps)

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        # Marks the fetch loop's task, for perform_seek (only Faust's fetch loop calls this).
        IN_FETCH_LOOP.set(True)
        # The fetch loop hands out one fetch's records before it begins the next.
        self.fetches_started += 1
        async for tp, message in super().getmany(timeout):
            self._fetched_topic = tp.topic  # the record the fetch loop now hands out
            self._fetched_message = message
            yield tp, message
            # Handed out: not kept past it (a record dropped unprocessed from its queue stayed
            # tracked while this held it, see fix 23).
            self._fetched_message = None

    def rewind_dropped(self, dropped: Mapping[TP, Iterable[int]]) -> None:
        """Records handed out were dropped from the streams' queues unprocessed while the flow
        ran on (fix 27; see `streamapp.faust_compat.dropped_records`): each partition this
        worker keeps goes back to the first of them, and the ledger hands them out once more.

        Nothing else would bring them back: under the cooperative protocol a kept partition is
        never sought, and its commits stopped at the first of them for good. Left alone: a
        partition no longer assigned or being given up (its next owner reads on from the
        offset committed as it was given up), a changelog, and any partition while an eager
        rebalance's seek is pending (it takes every partition back to its committed offset).
        """
        if self._streams_await_seek or self.should_stop:
            return
        try:
            assigned = self.assignment()
        except ConsumerNotStarted:
            return
        generation = self.app.consumer_generation_id
        acks_enabled_for = self.app.topics.acks_enabled_for
        for tp, offsets in dropped.items():
            offsets = sorted(offsets)
            if (
                not offsets
                or tp not in assigned
                or tp in self._giving_up
                or not acks_enabled_for(tp.topic)
            ):
                continue
            self._hand_out_ledger.rewind(tp, offsets, generation)
            first = min(offsets[0], self._dropped_seek_back.get(tp, offsets[0]))
            self._dropped_seek_back[tp] = first
            logger.info(
                "streamapp: %s[%d]: %d record(s) dropped from a stream queue unprocessed; the "
                "partition goes back to %d to process them",
                tp.topic,
                tp.partition,
                len(offsets),
                first,
            )

    def _forget_dropped_seek_back(self, revoked: Iterable[TP]) -> None:
        for tp in revoked:
            self._dropped_seek_back.pop(tp, None)

    async def _seek_back_to_dropped(self) -> None:
        """The seeks `rewind_dropped` asked for, as a round of the fetch loop begins: every
        record of the round before went through Faust's read mark already, so the mark can be
        moved back under them (set earlier, a record of that round past the dropped ones took
        the offsets between for a gap, acked them, and a commit passed them unprocessed)."""
        pending = dict(self._dropped_seek_back)
        await cast(ConsumerThread, self._thread).seek_back(pending)
        # Forgotten only once sought (a seek cancelled on the way is asked again at the next
        # round: the ledger holds the partition until its dropped records come), and only
        # where no later drop moved the mark meanwhile.
        for tp, offset in pending.items():
            if self._dropped_seek_back.get(tp) == offset:
                del self._dropped_seek_back[tp]
        assigned = self.assignment()
        for tp, offset in pending.items():
            if tp in assigned:
                # Faust's fetch loop drops a record below its read mark: the mark goes back as
                # its perform_seek sets it, at the offset the next record is read from.
                self._read_offset[tp] = offset

    async def _getmany(
        self, active_partitions: set[TP] | None, timeout: float
    ) -> Mapping[TP, list[Any]]:
        if self._dropped_seek_back:
            await self._seek_back_to_dropped()
        # Faust hands its live set of active partitions to the consumer thread, and aiokafka
        # returns every partition's buffered records when that set has emptied meanwhile (as
        # recovery pauses the actives), or records of a partition paused since. Faust's
        # getmany then drops the records of partitions no longer active without a word, while
        # aiokafka's position has passed them. A standby sought to its start whose first
        # records went that way resumed ~1,000 records further on, and its offset claimed them
        # all (lost updates). Such records go back: their partition is sought to the first one.
        # Not when a seek came in between, though: a rebalance's recovery that sought the
        # partition (from its store's offset) while the records were on their way decides
        # where it reads on (`ConsumerThread.seek_back`).
        thread = cast(ConsumerThread, self._thread)
        records = await super()._getmany(active_partitions, timeout)
        taken_to = thread.positions_after_fetch
        if active_partitions is not None:
            buffered = self._buffered_partitions
            passed = {
                tp: batch[0].offset
                for tp, batch in records.items()
                if batch and tp not in active_partitions and tp not in buffered
            }
            if passed:
                await thread.seek_back(passed, taken_to)
                records = {tp: batch for tp, batch in records.items() if tp not in passed}
        if IN_FETCH_LOOP.get() and self.batch_topics:
            # A batch topic's records go to their queues a partition at a time, before Faust's
            # getmany takes the rest record by record (fix 28). Nothing awaits from here to
            # Faust's getmany: what is checked here still holds as it starts.
            records = self._partition_hand_out(records, active_partitions)
        return records

    async def perform_seek(self) -> None:
        # Only recovery's seek, which starts after recovery asked for the resume, counts for
        # the stream partitions held. Faust's fetch loop seeks too, whenever it fetched while
        # the flow was stopped; were its seek to count (it may run between recovery's resume
        # and recovery's seek), records would flow while recovery's seek then moved every
        # partition back under them. Faust's gap detection took the offsets the seek moved
        # back over for gaps and acked them, and a record fetched before the seek and handed
        # out after it could pass records never handed out: acked, committed, never processed.
        recovery_seek = not IN_FETCH_LOOP.get() and bool(self._resume_after_seek)
        await super().perform_seek()
        if recovery_seek:
            self._sought_for_streams = True

    def watch_positions(self, tps: set[TP]) -> None:
        """Note the positions of ``tps`` as each fetch begins (fix 17); none: stop noting."""
        thread = self._thread
        if isinstance(thread, ConsumerThread):
            thread.positions_at_fetch_start = (-1, {})
            thread.watched_positions = frozenset(tps)

    def positions_at_fetch_start(self) -> tuple[int, Mapping[TP, int]]:
        """(``fetches_started`` of the latest fetch begun, the watched partitions' positions
        as it began): every record below those positions has been handed out (fix 17)."""
        thread = self._thread
        if isinstance(thread, ConsumerThread):
            return thread.positions_at_fetch_start
        return (-1, {})

    def shorten_fetch_wait(self) -> None:
        thread = self._thread
        if isinstance(thread, ConsumerThread):
            thread.shorten_fetch_wait()

    def restore_fetch_wait(self) -> None:
        thread = self._thread
        if isinstance(thread, ConsumerThread):
            thread.restore_fetch_wait()

    def release_streams_after_seek(self) -> None:
        """Resume the stream partitions held for recovery's seek, once it is done.

        Called by recovery once it has also resumed the flow (`faust_compat.recovery`), not
        at the end of the seek: resuming the flow empties every stream's queue, and a record
        fetched in between was put in one and dropped there, unprocessed and never acked,
        while the records after it were acked and committed past it (lost; seen under
        exactly_once when events arrived as a recovery ended).
        """
        if not (self._streams_await_seek and self._sought_for_streams):
            return
        held = self._resume_after_seek
        self._streams_await_seek = False
        self._sought_for_streams = False
        self._resume_after_seek = set()
        if held:
            super().resume_partitions(held & self.assignment())

    def _admit(self, message: Message) -> bool:
        """Whether a fetched stream record goes to the streams (see `streamapp.hand_out`)."""
        current = self.app.consumer_generation_id
        refusal = self._hand_out_ledger.admit(
            message.tp, message.offset, message.generation_id, current
        )
        if refusal is None:
            return True
        if (message.tp, current) not in self._refusals_logged:
            self._refusals_logged.add((message.tp, current))
            self.log.info(
                "%s[%d]@%d not handed out again: %s (first such record of this partition "
                "in generation %d)",
                message.topic,
                message.partition,
                message.offset,
                refusal.value,
                current,
            )
        return False

    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def commit(
        self, topics: TPorTopicSet | None = None, start_new_transaction: bool = True
    ) -> bool:
        if not self.in_transaction:
            if IN_FETCH_LOOP.get():
                return self._commit_beside_fetch_loop(topics)
            return await super().commit(topics, start_new_transaction=start_new_transaction)
        async with self._commit_lock:
            was_open = self._handing_out.is_set()
            self._handing_out.clear()
            try:
                if not await self._all_handed_out_processed():
                    return False
                await self.app.producer.flush()
                return await super().commit(topics, start_new_transaction=start_new_transaction)
            finally:
                if was_open:
                    self._handing_out.set()

    def _commit_beside_fetch_loop(self, topics: TPorTopicSet | None) -> bool:
        """The fetch loop's commit (every ``broker_commit_every`` acks), at-least-once: begun
        in a task of its own, or left to the commit in flight, never waited for (fix 24).

        Faust's fetch loop awaits this commit between two records, and Faust's commit waits
        for any commit in flight first. A commit sent while the group is joining is answered
        only once the join is over (refused, fix 20): every partition the worker kept stopped
        for the rest of the join, 0.3 to 2.7 s in ``bench/rebalance.py``. Waiting gains
        nothing: Faust's commit returns without committing after waiting for another one, and
        the offsets it would send are committed by the next one anyway.
        """
        if self._commit_fut is None:
            self.add_future(super().commit(topics))
        return False

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        # Faust forgets revoked partitions everywhere but in the set of those set aside for a
        # full queue, whose records its getmany then hands out (fix 18).
        self._buffered_partitions.difference_update(revoked)
        self._forget_dropped_seek_back(revoked)
        if incremental.incremental_join(self.app):
            await self._give_up(revoked)
            self._hand_out_ledger.forget(revoked)
            self._forget_refused_commits(revoked)
            await super().on_partitions_revoked(revoked)
            return
        self._hand_out_ledger.forget(revoked)
        self._refusals_logged.clear()
        # Under the cooperative protocol this runs after the assignment came in, with only what
        # was lost (often nothing): the partitions kept are committed too, since Faust's
        # assignment step then seeks every partition back to its committed offset. (Eager:
        # what is revoked is the whole assignment, so this is the same test.)
        if revoked or self.assignment():
            # Nothing more is handed out until the assignment, and what was is processed now:
            # Faust's handler suspends the flow and clears the queues, and a record a fetch had
            # in hand at that moment (waiting for the producer buffer to ebb) could still land
            # in a queue after the clear, to be skipped by its stream, acked and committed
            # unprocessed.
            self._handing_out.clear()
            if self.in_transaction:
                # Faust forgets the acked offsets of revoked partitions before its handler
                # commits, so their transactions would stay open: a partition this worker keeps
                # would carry output of records it then processes again (duplicates). Commit
                # and end every transaction first.
                await self.commit(start_new_transaction=False)
            else:
                # Faust forgets the acked offsets of revoked partitions here and never commits
                # them on a revocation: everything processed since the last periodic commit
                # (up to a commit interval's worth) was processed again by the next owner,
                # and under an eager protocol every rebalance revokes everything. Kafka
                # Streams commits on revocation; so does this.
                # Acked offsets only advance over consecutive processed records, so what
                # they cover is safe to commit even if an agent is still stuck on a record.
                await self._all_handed_out_processed()
                await self._commit_all_acked()
        self._forget_refused_commits(revoked)
        await super().on_partitions_revoked(revoked)

    async def _commit_offsets(
        self, offsets: Mapping[TP, int], start_new_transaction: bool = True
    ) -> bool:
        # Faust notes the offsets as committed even when the commit failed (fix 20).
        assigned = self.assignment()
        before = {tp: self._committed_offset[tp] for tp in offsets}
        committed: bool = await super()._commit_offsets(
            offsets, start_new_transaction=start_new_transaction
        )
        sent = {tp: offset for tp, offset in offsets.items() if tp in assigned}
        note_commit_outcome(
            self._committed_offset,
            self._refused_commits,
            before,
            sent,
            committed=committed or bool(self.in_transaction),
        )
        if sent and not committed and not self.in_transaction and not self.should_stop:
            # aiokafka says this at ERROR ("OffsetCommit failed ... will rejoin"), which
            # `streamapp.quiet_logs` demotes: during a rebalance it is routine, and fix 20
            # sends the offsets again.
            logger.info(
                "streamapp: the group refused a commit of %s (a rebalance is under way); "
                "the offsets go again with the next commit",
                incremental.partitions_text(sent),
            )
        return committed

    def _filter_committable_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        tps = list(tps)
        offsets: dict[TP, int] = super()._filter_committable_offsets(tps)
        for tp in tps:
            refused = self._refused_commits.get(tp)
            if refused is not None and tp not in offsets and self._should_commit(tp, refused):
                offsets[tp] = refused  # sent again (fix 20)
        return offsets

    def _forget_refused_commits(self, revoked: Iterable[TP]) -> None:
        # Its next owner commits it now: an offset of ours sent later could move it back.
        for tp in revoked:
            self._refused_commits.pop(tp, None)

    async def _give_up(self, revoked: set[TP]) -> None:
        """An incremental rebalance lost ``revoked``: they stop, and what was processed of them
        is committed before Faust forgets their acked offsets (at-least-once, as fix 9 does for
        a whole assignment); the partitions kept go on meanwhile.

        Under exactly_once the commit ends their transactions (none begins after it): what was
        processed of them is committed with its output and table writes, and their producers
        are then stopped (`incremental`) before the partitions are released. The kept
        partitions' transactions are not part of this commit and stay open.
        """
        streams = {tp for tp in revoked if self.app.topics.acks_enabled_for(tp.topic)}
        if not streams:
            return
        self._giving_up |= streams
        self.pause_partitions(streams)
        # The agents process what their queues hold of them (the queues are not cleared: the
        # records of the kept partitions there go on), then their acked offsets are committed.
        started = self.loop.time()
        deadline = started + max(self.commit_interval, 1.0) * 3
        while any(m.tp in streams for m in list(self._unacked_messages)):
            if self.loop.time() > deadline:
                self.log.warning(
                    "giving up %s: records handed out are still being processed; committing "
                    "what was processed of them",
                    sorted(streams),
                )
                break
            await self._wait_for_ack(timeout=1.0)
            self._clean_unacked_messages()
            if self.loop.time() - started > 1.0:
                gc.collect()  # a record dropped unprocessed leaves the weak set once collected
        await self.app.producer.flush()
        await self.maybe_wait_for_commit_to_finish()
        # Under exactly_once only the lost partitions' transactions end here: Faust's commit
        # begins a new one for each transaction it commits unless told not to, and one left
        # open on a producer about to stop would hold its partitions' last stable offset back
        # until the next owner fences it.
        await self.commit(topics=streams, start_new_transaction=not self.in_transaction)

    def prepare_incremental_assignment(self, gained: set[TP]) -> None:
        """Before Faust's assignment step of an incremental rebalance that gains ``gained``.

        They are sought and resumed by `incremental` once their tables recovered; the kept
        ones were never paused. Faust's step makes every partition of the assignment that is
        not paused active at once, while the flow runs on: the gained ones pause first, or
        records of them could be processed before their tables recovered (and again after
        their seek). And nothing waits for a recovery seek of Faust's (the last eager one is
        over, or sought nothing: ``ready``): a resume held for it would never come, and the
        gained partitions stayed paused for good.
        """
        self.pause_partitions(gained)
        self._streams_await_seek = False
        self._sought_for_streams = False
        self._resume_after_seek = set()

    async def seek_to_committed_partitions(self, tps: set[TP]) -> None:
        """Faust's ``perform_seek``, for ``tps`` only (gained in an incremental rebalance)."""
        thread = self._thread
        assert isinstance(thread, ConsumerThread)
        committed = await thread.seek_partitions_to_committed(tps)
        self._read_offset.update(
            {
                TP(tp.topic, tp.partition): offset if offset is not None and offset >= 0 else None
                for tp, offset in committed.items()
            }
        )
        self._committed_offset.update(
            {
                TP(tp.topic, tp.partition): offset or None
                for tp, offset in committed.items()
                if offset is not None
            }
        )

    async def _commit_all_acked(self) -> None:
        # Faust's commit returns without committing when another commit is in flight (it
        # waits for that one, which may have started before the last acks): let any such
        # commit finish first; nothing is handed out now, so this one covers every ack. (Faust's
        # ``_filter_committable_offsets`` consumes the acks it reads: not a question to ask.)
        await self.maybe_wait_for_commit_to_finish()
        await self.commit()

    async def on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
        self._giving_up = set()
        gained = set(assigned) - self._last_assigned
        self._last_assigned = set(assigned)
        if incremental.incremental_join(self.app):
            self.prepare_incremental_assignment(gained)
            self._handing_out.set()
            await super().on_partitions_assigned(assigned, generation_id)
            return
        self._streams_await_seek = True
        self._sought_for_streams = False
        self._resume_after_seek = set()
        self._handing_out.set()
        await super().on_partitions_assigned(assigned, generation_id)

    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        # Faust's fetch loop passes the offset of the record after the gap as ``offset_to``, and
        # the gap it records includes it: merged into the acked offsets, that record is then
        # listed twice, which ends the run of consecutive offsets a commit may advance over.
        # On a topic with transaction markers (any topic written under exactly_once) every
        # commit then stopped at the next marker, and the committed offset fell further behind.
        await super()._add_gap(tp, offset_from, offset_to - 1)

    async def _all_handed_out_processed(self) -> bool:
        started = self.loop.time()
        deadline = started + max(self.commit_interval, 1.0) * 3
        while self._unacked_messages:
            if self.loop.time() > deadline:
                # An agent stuck on a record: committing now could split it across
                # transactions, so this commit is skipped; the next one tries again.
                self.log.warning(
                    "commit skipped: %d records handed out are still being processed, e.g. %s",
                    len(self._unacked_messages),
                    [
                        (m.topic, m.partition, m.offset, m.refcount, m.generation_id)
                        for m in list(self._unacked_messages)[:3]
                    ],
                )
                return False
            await self._wait_for_ack(timeout=1.0)
            self._clean_unacked_messages()
            if self._unacked_messages and self.loop.time() - started > 1.0:
                # A record dropped unprocessed other than by a queue clear (those leave at
                # once, fix 23) leaves the weak set only once collected; Faust's wait_empty
                # collects for the same reason.
                gc.collect()
        return True

    def all_progress_committed(self) -> bool:
        """Whether every input this worker processed is covered by a commit, none in flight.

        Asked once the consumer stopped: its last commit may have failed (Faust logs that and
        carries on), and only then do acked offsets remain past the committed ones.
        """
        if self._unacked_messages:
            return False
        return not self._filter_committable_offsets(list(self._acked))


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer
    Producer = worker_clients.Producer
    TransactionManager = sends.TransactionManager
