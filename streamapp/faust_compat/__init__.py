"""The one place streamapp touches private names of Faust (faust-streaming) and aiokafka.

streamapp corrects and extends Faust in a few places that Faust does not open to users: its
consumer's fetch, commit and rebalance paths (`streamapp.faust_compat.transport`), its table
recovery (`streamapp.faust_compat.recovery`), its app's producer start and transport
(`streamapp.faust_compat.app`), its assignor's leader step (`streamapp.faust_compat.assignor`),
and reads and writes of its internals for the rest of streamapp: the group coordinator, the
assignment hand-over (`streamapp.faust_compat.access`); and aiokafka's group coordinator and
producer (`coordinator`, `producer_wait`), a worker's heartbeats right after a cooperative join
(`second_round`), and the group requests of a static member (`static_membership`); Faust's
table writes, encoded once (`encode_once`); the expiry heap of its windowed tables, rebuilt
after a recovery (`window_expiry`); its rebalance handlers, made incremental under the
cooperative protocol (`incremental`); its fetch loop's hand-out of each record, without a task
per record (`eager_hand_out`); its stream's acks and current event for an agent over batches
(`batch_stream`), a batch topic's records handed out in one call (`batch_hand_out`) and a
fetched partition's at a time (`partition_hand_out`), a batch's changelog records and join
output, sent together (`batch_changelog`) and put in aiokafka's open batches without a future
each (`accumulator_append`; `offline_delivery` delivers them without a broker, for a
benchmark), and a batch's table reads and writes, with the partition and sensors looked up
once per batch (`batch_table`); its exactly_once sends, in the transaction of the record they
are made for (`sends`), and what its topics send, encoded with codecs looked up once
(`send_codecs`) and handed to the producer without Faust's layers in between (`direct_send`);
the offsets reader's metadata of topics it finds unknown (`unknown_topics`); aiokafka's
producer sender's metadata refreshes, spaced by its retry backoff (`producer_metadata`); the
share of a round of its fetch loop that changelog records take (`replica_share`) and stream
records take, of each partition and in all (`partition_share`). Tables are kept in
streamapp's own RocksDB store (`streamapp.runtime.stores`), which Faust loads through its
public ``faust.stores`` entry point: no private name of Faust's stores is used.
Every private name those rely on is listed in `PRIVATE_NAMES` below, and nowhere else in
streamapp is one named (a unit test reads every module for them).

At import, this package checks that the installed Faust and aiokafka are the versions these
touch points were written against, and that each listed name still exists. Anything else
stops the worker with one line naming what changed, rather than letting a patch silently
miss (an override of a renamed method is never called) or double-correct (a Faust fix under
our own). Set ``STREAMAPP_SKIP_FAUST_CHECK=1`` to try other versions at your own risk.
"""

from __future__ import annotations

import dis
import importlib
import os
from collections.abc import Iterator
from importlib import metadata
from types import CodeType, FunctionType

#: The releases every touch point was checked against (pyproject.toml pins the same).
PINNED_VERSIONS = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0"}

#: ``module:Class`` -> the private names streamapp reads, writes or overrides on it (or on an
#: instance of it). A name is found as a class attribute or as ``self.<name>`` in the code of
#: the class or one of its bases (`_has_name`).
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread": (
        "_create_worker_consumer",  # transport fix 1: our assignor, always
        "_assignor",
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
        "_partition_assignment_strategy",  # read by start() to build the coordinator
        "_subscription",
        "_coordinator",
        "_client",  # static_membership wraps its send and close
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
        "_perform_assignment",  # coordinator: an envelope aiokafka cannot decode is no crash
        "_on_join_prepare",  # coordinator: the cooperative protocol keeps owned partitions
        "_on_join_complete",  # coordinator: ... and revokes only what it lost
        "_assignors",
        "_subscription",
        "_group_subscription",
        "_metadata_snapshot",  # transport fix 26: read by Faust's topic_partitions, 0 = unknown
        "_maybe_do_last_autocommit",
        "_do_commit_offsets",  # coordinator: a refused old-generation commit resets nothing new
        "_heartbeat_routine",  # second_round: prompt heartbeats after a cooperative join
        "_start_heartbeat_task",
        "_do_heartbeat",
        "_heartbeat_interval_ms",
    ),
    "aiokafka.consumer.group_coordinator:CoordinatorGroupRebalance": (
        "_send_sync_group_request",  # coordinator: error answers retried, not raised
        "_coordinator",
        "_retry_backoff_ms",
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
    ),
    "aiokafka.producer.producer:AIOKafkaProducer": (
        "_sender",  # producer_metadata (transport fix 22): its sender's refreshes, spaced
        "_message_accumulator",  # accumulator_append: a batch's records, no futures; and
        # offline_delivery: its batches taken and delivered without a broker (a benchmark)
        "_txn_manager",  # accumulator_append: what send checks, checked as send does
        "_key_serializer",
        "_value_serializer",
        "_max_request_size",
        "_partition",  # accumulator_append: an output record's partition, as send picks it
    ),
    "aiokafka.producer.message_accumulator:MessageAccumulator": (
        "_batches",  # accumulator_append: a partition's open batch, as add_message finds it
        "_closed",  # accumulator_append: what add_message checks
        "_exception",
    ),
    "aiokafka.producer.message_accumulator:MessageBatch": (
        "_builder",  # accumulator_append: a record appended without a future
    ),
    "aiokafka.producer.sender:Sender": (
        "_retry_backoff",  # producer_metadata: the backoff between them
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


class FaustCompatError(ImportError):
    """The installed Faust or aiokafka is not what streamapp's touch points were written for."""


#: Bytecode that reads, calls, sets or deletes an attribute of the object just loaded.
_ATTRIBUTE_OPS = frozenset({"LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "DELETE_ATTR"})
#: Bytecode that loads a local or closure variable (``self`` in a method or in a closure);
#: later CPythons add variants (LOAD_FAST_CHECK, LOAD_FAST_LOAD_FAST, LOAD_FAST_BORROW, ...).
_LOAD_VARIABLE = ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_CLASSDEREF")
#: Where a descriptor keeps its functions: staticmethod, classmethod, property, wraps.
_FUNCTION_SLOTS = ("__func__", "fget", "fset", "fdel", "func", "__wrapped__")


def _code_objects(cls: type) -> Iterator[CodeType]:
    """The code of every function defined in ``cls`` and its bases, nested code included
    (closures, comprehensions), functions held by descriptors too (property, classmethod,
    mode's cached_property, which keeps them in its ``__dict__``)."""
    for klass in cls.__mro__:
        for value in vars(klass).values():
            todo = [
                code
                for held in _held_functions(value)
                if isinstance(code := getattr(held, "__code__", None), CodeType)
            ]
            while todo:
                code = todo.pop()
                yield code
                todo.extend(c for c in code.co_consts if isinstance(c, CodeType))


def _held_functions(value: object) -> list[object]:
    """A class attribute and what it holds that may be a function."""
    if isinstance(value, type):
        return []  # a nested class: its code is its own
    held = [value]
    try:
        held += [getattr(value, slot, None) for slot in _FUNCTION_SLOTS]
        if not isinstance(value, FunctionType):
            held += list(vars(value).values())
    except Exception:  # an attribute that is no plain object (a proxy) holds no code of ours
        pass
    return held


def _has_name(cls: type, name: str) -> bool:
    """True if ``name`` is an attribute of ``cls``, or the code of ``cls`` or one of its bases
    reads, sets or deletes ``self.<name>`` (an instance attribute, set in ``__init__`` or
    elsewhere).

    Read from the compiled code, not the source: ``inspect.getsource`` parses each class's
    whole module again (about 1.5 s of every worker's import for these names); the bytecode
    is already in memory, and a name only in a comment or a string does not count.
    """
    if hasattr(cls, name):
        return True
    for code in _code_objects(cls):
        if name not in code.co_names:  # most code never names it: no need to disassemble
            continue
        self_loaded = False  # the instruction before loaded ``self``
        for instruction in dis.get_instructions(code):
            if self_loaded and instruction.opname in _ATTRIBUTE_OPS and instruction.argval == name:
                return True
            self_loaded = _loads_self(instruction)
    return False


def _loads_self(instruction: dis.Instruction) -> bool:
    if not instruction.opname.startswith(_LOAD_VARIABLE):
        return False
    loaded = instruction.argval
    if isinstance(loaded, tuple):  # LOAD_FAST_LOAD_FAST (3.13): the second one is on top
        loaded = loaded[-1]
    return bool(loaded == "self")


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
    for owner, attrs in names.items():
        module_name, _, class_name = owner.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            found.append(f"{owner} no longer exists")
            continue
        missing = [name for name in attrs if not _has_name(cls, name)]
        if missing:
            found.append(f"{owner} has no {', '.join(missing)}")
    return found


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
