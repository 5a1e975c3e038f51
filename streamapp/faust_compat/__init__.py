"""The one place streamapp touches private names of Faust (faust-streaming) and aiokafka.

streamapp corrects and extends Faust in a few places that Faust does not open to users: its
consumer's fetch, commit and rebalance paths (`streamapp.faust_compat.transport`), its table
recovery (`streamapp.faust_compat.recovery`), its app's producer start and transport
(`streamapp.faust_compat.app`), its assignor's leader step (`streamapp.faust_compat.assignor`),
and reads and writes of its internals for the rest of streamapp: the group coordinator, the
assignment hand-over (`streamapp.faust_compat.access`); the
worker's Kafka clients in Faust's aiokafka driver, streamapp's own (`worker_clients`); Faust's
table writes, encoded once
(`encode_once`); the expiry heap of its windowed tables, rebuilt after a recovery
(`window_expiry`); its rebalance handlers, made incremental under the cooperative protocol
(`incremental`); its fetch loop's hand-out of each record, without a task per record
(`eager_hand_out`); its stream's acks and current event for an agent over batches
(`batch_stream`), a batch topic's records handed out in one call (`batch_hand_out`) and a
fetched partition's at a time (`partition_hand_out`), a batch's changelog records and
join output, sent together (`batch_changelog`; `offline_delivery` delivers them without a
broker, for a benchmark), and a batch's table reads and writes, with the partition, key
index and sensors looked up once per batch (`batch_table`); its
exactly_once sends, in the transaction of the record they are made for (`sends`), and what
its topics send, encoded with codecs looked up once (`send_codecs`) and handed to the
producer without Faust's layers in between (`direct_send`); the offsets
reader's metadata of topics it finds unknown (`unknown_topics`); the share of a round of
its fetch loop that changelog records take (`replica_share`) and stream records take, of each
partition and in all (`partition_share`). Tables are kept in streamapp's own RocksDB store
(`streamapp.runtime.stores`), which Faust loads through its public ``faust.stores`` entry
point: no private name of Faust's stores is used.
Every private name those rely on is listed in `PRIVATE_NAMES` below, and nowhere else in
streamapp is one named (a unit test reads every module for them), except aiokafka's in the
worker's group protocol (`streamapp.runtime.group`) and producer (`streamapp.runtime.producer`),
each with its own list and check.

At import, this package checks that the installed Faust and aiokafka are the versions these
touch points were written against, and that each listed name still exists. Anything else
stops the worker with one line naming what changed, rather than letting a patch silently
miss (an override of a renamed method is never called) or double-correct (a Faust fix under
our own). Set ``STREAMAPP_SKIP_FAUST_CHECK=1`` to try other versions at your own risk.
"""

from __future__ import annotations

import os
from importlib import metadata

# The name check is shared with the runtime's own (`streamapp.runtime.library_check`).
from streamapp.runtime.library_check import has_name, name_problems

#: The releases every touch point was checked against (pyproject.toml pins the same).
PINNED_VERSIONS = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0"}

#: ``module:Class`` -> the private names streamapp reads, writes or overrides on it (or on an
#: instance of it). A name is found as a class attribute or as ``self.<name>`` in the code of
#: the class or one of its bases (`_has_name`).
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread": (
        "_create_worker_consumer",  # worker_clients: streamapp's own consumer (fix 1)
        "_ensure_consumer",
        "_consumer",  # access.group_coordinator
        "_highwaters",  # transport fix 2 and 13: ends by ListOffsets, on the offsets reader
        "_fetch_records",  # transport fixes 17, 24, 25: positions noted, round shares bounded
        "_seek_wait",  # transport fix 7: records of a partition not active sent back
    ),
    "faust.transport.drivers.aiokafka:ConsumerRebalanceListener": (
        "_thread",  # transport: the app's generation kept through an incremental rebalance
    ),
    "faust.transport.drivers.aiokafka:Consumer": (
        "_new_consumer_thread",
        "_thread",
        "_to_message",  # partition_hand_out (fix 28): a record's message, as Faust's getmany
    ),
    "faust.transport.consumer:Consumer": (
        "_getmany",  # transport fix 7: records of a partition no longer active
        "_add_gap",  # transport: Faust's off-by-one gap
        "_acked",
        "_unacked_messages",
        "_buffered_partitions",  # transport fix 18: not past a pause or a revocation
        "_paused_partitions",
        "_clean_unacked_messages",
        "_filter_committable_offsets",
        "_commit_offsets",  # transport fix 20: a refused commit is sent again
        "_should_commit",
        "_wait_for_ack",
        "_commit_fut",  # transport fix 24: the fetch loop's commit, left to the one in flight
        "_read_offset",  # recovery: the last record handed out; fix 27: moved back; 28: set
        "_commit_every",  # partition_hand_out (fix 28): the fetch loop's commit, left to it
        "_committed_offset",  # incremental: the gained partitions' seek, as perform_seek's
        "_drain_messages",  # eager_hand_out: its per-record wait_first call is recognised
        "_acked_index",  # batch_stream: a batch acked as Consumer.ack acks one record
        "_n_acked",
        "_waiting_for_ack",
    ),
    "faust.transport.conductor:Conductor": (
        "_tp_index",  # batch_hand_out: the channels a partition's records go to
        "_tp_to_callback_lock",
    ),
    "faust.serializers.registry:Registry": (
        "_serializer",  # resolved_codecs: the codec Registry's calls pick, looked up once
        "_prepare_payload",
    ),
    "faust.streams:Stream": (
        "_py_aiter",  # stream: Faust's Python iteration, which acks through Consumer.ack
        "_active_agens",
        "_set_current_event",  # batch_stream: Faust's current event, once per batch
        "_channel_stop_iteration",
    ),
    "faust.tables.recovery:Recovery": (
        "_build_offsets",  # recovery: stores claiming more than their changelog go aside
        "_seek_offsets",  # recovery: where a replay starts being this replay's
        "_build_highwaters",  # recovery: a standby's changelog recreated mid-recovery
        "_generation_id",  # incremental: Faust's on_rebalance, for a recovery of gains only
        "_set_recovery_ended",
    ),
    "faust.tables.manager:TableManager": (
        "_pending_persisted_offsets",  # recovery: exactly_once store offsets, once committed
        "_changelog_queue",  # recovery: the queue, not cleared on every resume
        "_recovery",
        "_changelogs",  # incremental: changelog topic -> table, as Faust's on_rebalance reads
    ),
    "aiokafka.consumer.consumer:AIOKafkaConsumer": (
        "_subscription",  # transport fix 7: a partition's position
        "_coordinator",  # access.group_coordinator
        "_client",  # access.refresh_worker_metadata, unknown_topics
        "_fetcher",  # transport fix 16: a short fetch wait while recovering
    ),
    "aiokafka.consumer.fetcher:Fetcher": (
        "_fetch_max_wait_ms",  # transport fix 16: read as each fetch request is built
        "_get_actions_per_node",  # transport fix 19: builds each fetch request
        "_records",  # transport fixes 19 and 25: fetched records not handed out yet
    ),
    "aiokafka.protocol.fetch:FetchRequest": (
        "_max_wait_ms",  # transport fix 19: a request's wait, lowered while records pend
    ),
    "faust.app.base:App": (
        "_new_transport",
        "_consumer",
        "_on_partitions_revoked",  # incremental: the handlers, for a cooperative join
        "_on_partitions_assigned",
        "_update_assignment",
    ),
    "aiokafka.consumer.group_coordinator:GroupCoordinator": (
        "_metadata_snapshot",  # transport fix 26: read by Faust's topic_partitions, 0 = unknown
    ),
    "faust.assignor.partition_assignor:PartitionAssignor": (
        "_perform_assignment",
        "_assignment",
        "_active_tps",
        "_standby_tps",
        "_topic_groups",
        "_url",
    ),
    "faust.topics:Topic": (
        "_on_published",  # direct_send: Faust's delivery callback of a send
    ),
    "faust.transport.consumer:TransactionManager": (
        "_tps_to_transactional_ids",  # sends: the transaction of a source partition
    ),
    "faust.transport.drivers.aiokafka:Producer": (
        "_producer",  # batch_changelog: a batch's changelog records, on aiokafka's producer
        "_transaction_producers",
        "_trn_locks",
        "_producer_type",  # worker_clients: streamapp's own aiokafka producer
    ),
    "aiokafka.producer.producer:AIOKafkaProducer": (
        # offline_delivery: its batches taken and delivered without a broker (a benchmark)
        "_message_accumulator",
    ),
    "faust.tables.base:Collection": (
        "_maybe_set_key_ttl",
        "_sensor_on_set",
        "_maybe_del_key_ttl",  # encode_once: a deletion in a batch, as Faust's on_key_del
        "_sensor_on_del",
        "_on_changelog_sent",  # batch_changelog: the persisted offset, once per batch
        "_should_expire_keys",  # window_expiry: the heap rebuilt after a recovery (faust #385)
        "_partition_timestamps",
        "_partition_timestamp_keys",
        "_partition_latest_timestamp",
        "_to_key",
        "_new_store",  # set_table: the sets of a SetTable kept by streamapp.set_tables
    ),
    "mode.utils.queues:FlowControlEvent": (
        "_queues",  # dropped_records (transport fix 23): the queues its clear empties
    ),
    "mode.utils.queues:FlowControlQueue": (
        "_queue",  # dropped_records: the events a clear drops
    ),
    "aiokafka.coordinator.assignors.sticky.sticky_assignor:StickyPartitionAssignor": (
        "_metadata",  # bench/strategies.py runs aiokafka's sticky assignor beside ours
    ),
}


#: A listed name counts as present if the class has it or its code sets or reads it on self.
_has_name = has_name


class FaustCompatError(ImportError):
    """The installed Faust or aiokafka is not what streamapp's touch points were written for."""


def problems(names: dict[str, tuple[str, ...]], pinned: dict[str, str]) -> list[str]:
    """What differs from what the touch points expect: versions, then missing names."""
    found: list[str] = []
    for dist, wanted in pinned.items():
        try:
            installed = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found.append(f"{dist} is not installed (streamapp needs {wanted})")
            continue
        if installed != wanted:
            found.append(f"{dist} {installed} is installed, streamapp was checked with {wanted}")
    return found + name_problems(names)


def check() -> None:
    """Raise `FaustCompatError` (one line) unless every touch point still holds."""
    if os.environ.get("STREAMAPP_SKIP_FAUST_CHECK") == "1":
        return
    found = problems(PRIVATE_NAMES, PINNED_VERSIONS)
    if found:
        raise FaustCompatError(
            "streamapp cannot run on these Faust/aiokafka releases: "
            + "; ".join(found)
            + " (install the versions pyproject.toml pins, or set STREAMAPP_SKIP_FAUST_CHECK=1)"
        )


check()
