"""streamapp's group protocol: the worker's consumer and its group coordinator.

aiokafka has no cooperative protocol (aio-libs/aiokafka #1126), and its group coordinator opens
no public way to change how a member joins, heartbeats, leaves or reads its group's answers:
every step is a private method of ``GroupCoordinator``. And ``AIOKafkaConsumer.start`` builds
that coordinator from its module's global name, with no argument to pick another. So this is
the one package of streamapp allowed aiokafka's internals on the consumer side, and the only
one that uses them there:

- `coordinator.Coordinator`, a subclass of aiokafka's ``GroupCoordinator`` whose behaviours
  are each a subclass in a module of its own, overriding aiokafka's steps: the cooperative
  protocol, KIP-429 (`cooperative`); prompt heartbeats after a join (`prompt_heartbeats`);
  error answers to JoinGroup and SyncGroup survived (`join_answers`); a member subscription
  the leader cannot decode read as no topics (`member_envelopes`); a commit refused for an
  older generation leaving the newer one alone (`commit_generation`); static membership made
  safe to stop and to fence (`static_membership`);
- `consumer.WorkerConsumer`, a subclass of ``AIOKafkaConsumer`` whose ``start`` takes
  aiokafka's steps with that coordinator.

Only a `WorkerConsumer` builds a `Coordinator`. Nothing of aiokafka's is replaced: its classes,
and every other consumer in the process (a plain ``AIOKafkaConsumer``, streamapp's offsets
reader), behave as aiokafka documents.

Every aiokafka internal these modules rely on is listed in `PRIVATE_NAMES` (and the keywords
of the constructors they call in `KEYWORDS`), and checked as this package is
imported, against the aiokafka releases in `AIOKAFKA_RELEASES` (`streamapp.runtime.library_check`):
an aiokafka that renamed one stops the worker with one line naming it, rather than leaving an
override uncalled. A unit test reads these modules for every aiokafka private name they use.
"""

from __future__ import annotations

from streamapp.runtime import library_check

#: The aiokafka releases this package was checked against: ``>=0.14,<0.15``.
AIOKAFKA_RELEASES: library_check.Ranges = {"aiokafka": ((0, 14), (0, 15))}

#: ``module:Class`` -> the aiokafka internals this package reads, sets or overrides on it (or on
#: an instance of it).
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "aiokafka.consumer.consumer:AIOKafkaConsumer": (
        # consumer: what aiokafka's start reads and sets, read and set as it does.
        "_loop",
        "_client",
        "_wait_topics",
        "_subscription",
        "_fetcher",
        "_coordinator",
        "_group_id",
        "_group_instance_id",
        "_key_deserializer",
        "_value_deserializer",
        "_fetch_min_bytes",
        "_fetch_max_bytes",
        "_fetch_max_wait_ms",
        "_max_partition_fetch_bytes",
        "_check_crcs",
        "_consumer_timeout",
        "_retry_backoff_ms",
        "_auto_offset_reset",
        "_isolation_level",
        "_client_rack",
        "_heartbeat_interval_ms",
        "_session_timeout_ms",
        "_enable_auto_commit",
        "_auto_commit_interval_ms",
        "_partition_assignment_strategy",
        "_exclude_internal_topics",
        "_rebalance_timeout_ms",
        "_max_poll_interval_ms",
    ),
    "aiokafka.consumer.fetcher:Fetcher": (
        # consumer.fetch_wait_ms: the wait each fetch request is built with, read per request
        "_fetch_max_wait_ms",
    ),
    "aiokafka.consumer.group_coordinator:GroupCoordinator": (
        "_send_req",  # join_answers: the request an answer is for; static_membership: v3
        "_do_rejoin_group",  # join_answers: error answers caught around one join
        "_retry_backoff_ms",
        "_perform_assignment",  # member_envelopes: the leader's step
        "_do_commit_offsets",  # commit_generation: the generation a commit was sent with
        "_heartbeat_routine",  # prompt_heartbeats
        "_start_heartbeat_task",
        "_do_heartbeat",
        "_heartbeat_interval_ms",
        "_subscription",
        "_on_join_prepare",  # cooperative: keep what is owned through the join
        "_on_join_complete",  # cooperative: revoke only what was lost
        "_assignors",
        "_group_subscription",
        "_maybe_do_last_autocommit",
        "_maybe_leave_group",  # static_membership: LeaveGroup v3 as the coordinator closes
        "_closing",
        "_client",
        "_group_instance_id",
    ),
}

#: ``module:Class`` -> the keywords of its constructor this package passes.
KEYWORDS: dict[str, tuple[str, ...]] = {
    "aiokafka.consumer.fetcher:Fetcher": (
        "key_deserializer",
        "value_deserializer",
        "fetch_min_bytes",
        "fetch_max_bytes",
        "fetch_max_wait_ms",
        "max_partition_fetch_bytes",
        "check_crcs",
        "fetcher_timeout",
        "retry_backoff_ms",
        "auto_offset_reset",
        "isolation_level",
        "client_rack",
    ),
    "aiokafka.consumer.group_coordinator:GroupCoordinator": (
        "group_id",
        "group_instance_id",
        "heartbeat_interval_ms",
        "session_timeout_ms",
        "retry_backoff_ms",
        "enable_auto_commit",
        "auto_commit_interval_ms",
        "assignors",
        "exclude_internal_topics",
        "rebalance_timeout_ms",
        "max_poll_interval_ms",
    ),
}

library_check.check(
    "streamapp's group protocol (streamapp.runtime.group)",
    PRIVATE_NAMES,
    AIOKAFKA_RELEASES,
    keywords=KEYWORDS,
)
