"""Before a worker joins: do the app's source topics exist, partitioned as its tables need?

Kafka Streams refuses to start on a missing source topic (``MissingSourceTopicException``)
and on co-partitioned topics whose partition counts differ; Faust instead subscribes, and a
missing topic is created by the broker with its default count (if it auto-creates at all),
a mis-sized one fails later inside the worker (``PartitionsMismatch`` when a table is written,
``ConsistencyError`` in recovery), and the worker crashes into a restart loop. This module
answers the question once, at startup, from facts that every worker reads the same way, so
every worker refuses the same way: it is a startup check, not a leader decision.

- `declared_topics(app)`: what the app declares. Its *source topics* are the topics its
  agents consume, except Faust's internal ones (changelogs, the leader topic, repartition and
  agent topics), which Faust creates itself with CreateTopics. Each has a declared partition
  count: the topic's ``partitions=`` or the app's ``topic_partitions``.
- `find_problems(declared, existing)`: pure; which sources are missing, and which topics that
  must be co-partitioned differ in partition count.
- `read_partition_counts` / `create_topics`: the broker side, with aiokafka's admin client.

Which topics must be co-partitioned. A worker cannot see which agent writes which table, so
the declarations say it: topics declared together (``app.topic("impressions", "clicks",
partitions=6)``, one count for both) are co-partitioned, and a source topic goes with every
table declared with the same partition count (Faust's own rule: a table's partition *p* is
written from source partition *p*). A table's changelog that exists counts with the count it
has; one that does not yet exist, with the table's declared count (Faust creates it so).
Global tables are on every worker whatever their count, and a table that uses the producer's
partitioner follows its keys, not a source partition: neither is tied to a source topic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from faust.types import AppT, TopicT

from assignor.union_find import UnionFind

logger = logging.getLogger(__name__)

__all__ = [
    "CreatedTopics",
    "DeclaredTopics",
    "GroupMember",
    "MissingSourceTopic",
    "PartitionCountMismatch",
    "SourceTopic",
    "SourceTopicsReport",
    "TableTopic",
    "TopicCheckError",
    "TopicProblem",
    "check_source_topics",
    "create_topics",
    "declared_topics",
    "describe_problems",
    "find_problems",
    "partition_count",
    "read_partition_counts",
]

#: Kafka's error code for a topic that already exists (CreateTopics).
TOPIC_ALREADY_EXISTS = 36
#: How long one metadata or CreateTopics round trip may take before the check gives up.
REQUEST_TIMEOUT_S = 30.0


class TopicCheckError(RuntimeError):
    """The broker could not be asked, or refused to create a topic; the message says which."""


@dataclass(frozen=True)
class SourceTopic:
    """A topic an agent consumes that the app does not create itself."""

    name: str
    partitions: int  # as declared: the topic's ``partitions=`` or the app's ``topic_partitions``
    replicas: int  # as declared: the topic's ``replicas=`` or ``topic_replication_factor``


@dataclass(frozen=True)
class TableTopic:
    """A table and its changelog topic, which must be partitioned as the table declares."""

    table: str
    changelog: str
    partitions: int
    follows_sources: bool  # False for a table that uses the partitioner (keys pick partitions)


@dataclass(frozen=True)
class DeclaredTopics:
    sources: tuple[SourceTopic, ...] = ()
    tables: tuple[TableTopic, ...] = ()
    #: Topics declared together in one ``app.topic(a, b, ...)``: co-partitioned by declaration.
    copartitioned: tuple[tuple[str, ...], ...] = ()

    def source(self, name: str) -> SourceTopic | None:
        return next((s for s in self.sources if s.name == name), None)


@dataclass(frozen=True)
class MissingSourceTopic:
    topic: str
    partitions: int  # the count to create it with: the declared one


@dataclass(frozen=True)
class GroupMember:
    """One topic of a co-partition group, as the mismatch message names it."""

    topic: str
    partitions: int  # what it has, or (not existing) what it is declared with
    exists: bool
    table: str | None = None  # set for a changelog: the table it belongs to
    table_declares: int | None = None  # set when an existing changelog differs from its table


@dataclass(frozen=True)
class PartitionCountMismatch:
    members: tuple[GroupMember, ...]


TopicProblem = MissingSourceTopic | PartitionCountMismatch


# -- what the app declares --


def declared_topics(app: AppT) -> DeclaredTopics:
    """The source topics and tables of a Faust app, as its code declares them.

    Reads ``app.agents``, ``app.tables`` and ``app.conf`` only; nothing is contacted. The app's
    modules must have been imported (autodiscovered ones too) for its agents to be known.
    """
    conf = app.conf
    default_partitions = int(conf.topic_partitions)
    default_replicas = int(conf.topic_replication_factor)
    sources: dict[str, SourceTopic] = {}
    explicit: set[str] = set()
    groups: list[tuple[str, ...]] = []
    for agent in app.agents.values():
        channel = agent.channel
        # In-memory channels have no topic; a pattern subscription has no names to check; an
        # internal topic (an agent declared with a name, not a topic) Faust creates itself.
        if not isinstance(channel, TopicT) or channel.pattern or channel.internal:
            continue
        names = tuple(channel.topics)
        for name in names:
            if name in explicit:
                continue  # an explicit count declared elsewhere wins over the app's default
            sources[name] = SourceTopic(
                name,
                int(channel.partitions or default_partitions),
                int(channel.replicas or default_replicas),
            )
            if channel.partitions:
                explicit.add(name)
        if len(set(names)) > 1:
            groups.append(tuple(sorted(set(names))))
    tables: list[TableTopic] = []
    for table in app.tables.values():
        if table.is_global:
            continue
        tables.append(
            TableTopic(
                table=table.name,
                changelog=table.changelog_topic.get_topic_name(),
                partitions=int(table.partitions or default_partitions),
                follows_sources=not table.use_partitioner,
            )
        )
    return DeclaredTopics(
        sources=tuple(sorted(sources.values(), key=lambda s: s.name)),
        tables=tuple(sorted(tables, key=lambda t: t.table)),
        copartitioned=tuple(sorted(set(groups))),
    )


# -- the check (pure) --


# Tables and topics share one namespace in the union-find; a table's key cannot be a topic
# name (topic names hold no spaces).
def _table_key(table: TableTopic) -> str:
    return f"table {table.table}"


def copartition_groups(declared: DeclaredTopics) -> list[tuple[str, ...]]:
    """The groups of source topics and table keys that must share one partition count.

    Each group is sorted; only groups of two or more are returned, in sorted order.
    """
    groups = UnionFind()
    for source in declared.sources:
        groups.find(source.name)
    for table in declared.tables:
        groups.find(_table_key(table))
    for together in declared.copartitioned:
        for name in together[1:]:
            groups.union(together[0], name)
    by_count: dict[int, list[str]] = {}
    for table in declared.tables:
        if table.follows_sources:
            by_count.setdefault(table.partitions, []).append(_table_key(table))
    for source in declared.sources:
        for key in by_count.get(source.partitions, []):
            groups.union(source.name, key)
    return sorted(tuple(sorted(m)) for m in groups.sets().values() if len(m) > 1)


def find_problems(declared: DeclaredTopics, existing: Mapping[str, int]) -> list[TopicProblem]:
    """What stops the app's worker from starting, given each existing topic's partition count.

    ``existing`` may hold any topics; those the app does not mention are ignored. Missing
    source topics come first (sorted), then one mismatch per co-partition group whose counts
    differ. A missing source takes part in its group with its declared count, so that creating
    it from the declaration is refused when the result could not be co-partitioned.
    """
    problems: list[TopicProblem] = [
        MissingSourceTopic(s.name, s.partitions) for s in declared.sources if s.name not in existing
    ]
    tables = {_table_key(t): t for t in declared.tables}
    groups = copartition_groups(declared)
    for group in groups:
        members = [_member(name, declared, tables, existing) for name in group]
        # Each table counts with its changelog's count and with its own declared count: a
        # changelog that differs from its table is a mismatch on its own.
        counts = {m.partitions for m in members}
        counts |= {m.table_declares for m in members if m.table_declares is not None}
        if len(counts) > 1:
            problems.append(PartitionCountMismatch(tuple(members)))
    grouped = {name for group in groups for name in group}
    for table in declared.tables:
        key = _table_key(table)
        if key in grouped:
            continue
        # A table tied to no source still needs its changelog partitioned as it declares.
        member = _member(key, declared, tables, existing)
        if member.table_declares is not None:
            problems.append(PartitionCountMismatch((member,)))
    return problems


def _member(
    name: str,
    declared: DeclaredTopics,
    tables: Mapping[str, TableTopic],
    existing: Mapping[str, int],
) -> GroupMember:
    table = tables.get(name)
    if table is None:
        source = declared.source(name)
        assert source is not None, name
        have = existing.get(name)
        return GroupMember(
            name, have if have is not None else source.partitions, exists=have is not None
        )
    have = existing.get(table.changelog)
    if have is None:
        return GroupMember(table.changelog, table.partitions, exists=False, table=table.table)
    differs = table.partitions if have != table.partitions else None
    return GroupMember(
        table.changelog, have, exists=True, table=table.table, table_declares=differs
    )


# -- the one line --


def partition_count(n: int) -> str:
    """``1 partition``, ``8 partitions``."""
    return f"{n} partition" if n == 1 else f"{n} partitions"


def _describe_member(m: GroupMember) -> str:
    name = m.topic if m.table is None else f"{m.topic} (changelog of table {m.table})"
    if not m.exists:
        return f"{name} does not exist yet, declared with {partition_count(m.partitions)}"
    if m.table_declares is not None:
        return (
            f"{name} has {partition_count(m.partitions)} but the table declares {m.table_declares}"
        )
    return f"{name} has {partition_count(m.partitions)}"


def describe_problems(problems: Sequence[TopicProblem], *, create_command: str) -> str:
    """One line naming every problem; ``create_command`` is how to create missing sources."""
    parts: list[str] = []
    missing = [p for p in problems if isinstance(p, MissingSourceTopic)]
    if len(missing) == 1:
        only = missing[0]
        parts.append(
            f"source topic {only.topic} does not exist; create it with "
            f"{partition_count(only.partitions)} (as the app declares it): {create_command}"
        )
    elif missing:
        listed = ", ".join(f"{m.topic} ({partition_count(m.partitions)})" for m in missing)
        parts.append(
            f"source topics {listed} do not exist; create them with those partition counts "
            f"(as the app declares them): {create_command}"
        )
    for problem in problems:
        if isinstance(problem, PartitionCountMismatch):
            listed = ", ".join(_describe_member(m) for m in problem.members)
            parts.append(
                f"topics that must be co-partitioned differ in partition count: {listed}; "
                "give them one count (a topic cannot lose partitions: recreate it, or declare "
                "the count it has with partitions=)"
            )
    return "; ".join(parts)


# -- the broker side --


def _admin(bootstrap: str, timeout_s: float) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000)
    )


async def read_partition_counts(
    bootstrap: str, topics: Iterable[str], *, timeout_s: float = REQUEST_TIMEOUT_S
) -> dict[str, int]:
    """The partition count of each of ``topics`` that exists; missing ones are left out.

    Asks for the metadata of *all* topics: a request naming a topic lets a broker that
    auto-creates topics create it (aiokafka's admin client asks with auto-creation allowed),
    and a check must never create what it looks for.
    """
    wanted = set(topics)
    if not wanted:
        return {}
    admin = _admin(bootstrap, timeout_s)
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
        # A topic created a moment ago may be listed without its partitions yet; ask again.
        for _attempt in range(10):
            described = await asyncio.wait_for(admin.describe_topics(), timeout_s)
            counts: dict[str, int] = {}
            settling = False
            for entry in described:
                name = entry["topic"]
                if name not in wanted:
                    continue
                if entry["partitions"]:
                    counts[name] = len(entry["partitions"])
                elif entry["error_code"]:
                    settling = True
            if not settling:
                return counts
            await asyncio.sleep(0.5)
        return counts
    except (TimeoutError, KafkaError, OSError) as exc:
        raise TopicCheckError(f"cannot read topic metadata from {bootstrap}: {exc!r}") from exc
    finally:
        await admin.close()


@dataclass(frozen=True)
class CreatedTopics:
    created: tuple[SourceTopic, ...]
    already_there: tuple[SourceTopic, ...]  # created by someone else meanwhile (another worker)


async def create_topics(
    bootstrap: str,
    topics: Sequence[SourceTopic],
    *,
    replication_factor: int | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> CreatedTopics:
    """Create ``topics`` with their declared counts (and replicas, unless one is given).

    A topic another worker created meanwhile is fine (workers starting together race to
    create); any other refusal by the broker raises `TopicCheckError` naming topic and cause.
    """
    if not topics:
        return CreatedTopics((), ())
    admin = _admin(bootstrap, timeout_s)
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
        response = await asyncio.wait_for(
            admin.create_topics(
                [
                    NewTopic(
                        t.name,
                        num_partitions=t.partitions,
                        replication_factor=replication_factor or t.replicas,
                    )
                    for t in topics
                ],
                timeout_ms=int(timeout_s * 1000),
            ),
            timeout_s + 5,
        )
    except (TimeoutError, KafkaError, OSError) as exc:
        raise TopicCheckError(f"cannot create topics on {bootstrap}: {exc!r}") from exc
    finally:
        await admin.close()
    by_name = {t.name: t for t in topics}
    created: list[SourceTopic] = []
    already: list[SourceTopic] = []
    failures: list[str] = []
    for result in response.to_object()["topic_errors"]:
        topic = by_name[result["topic"]]
        code = result["error_code"]
        if code == 0:
            created.append(topic)
        elif code == TOPIC_ALREADY_EXISTS:
            already.append(topic)
        else:
            reason = result.get("error_message") or f"error code {code}"
            failures.append(f"{topic.name}: {reason}")
    if failures:
        raise TopicCheckError(f"the broker refused to create {'; '.join(failures)}")
    return CreatedTopics(tuple(created), tuple(already))


# -- the whole check, as the worker and `streamapp topics create` run it --


@dataclass(frozen=True)
class SourceTopicsReport:
    problems: tuple[TopicProblem, ...]  # what is still wrong; empty when the worker may start
    created: tuple[SourceTopic, ...] = ()
    #: Source topics found on the broker (before, or created meanwhile by someone else),
    #: with the partition count each has.
    already_there: tuple[tuple[str, int], ...] = ()


async def check_source_topics(
    bootstrap: str,
    declared: DeclaredTopics,
    *,
    create: bool,
    replication_factor: int | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> SourceTopicsReport:
    """Read the broker's topics and find the problems; with ``create``, create missing sources.

    Nothing is created while any co-partitioned group differs in count (whether or not the
    missing topics take part in it): the worker refuses anyway, and a topic created by
    mistake cannot be taken back without losing what was written to it.
    """
    wanted = [s.name for s in declared.sources] + [t.changelog for t in declared.tables]
    existing = await read_partition_counts(bootstrap, wanted, timeout_s=timeout_s)
    problems = find_problems(declared, existing)
    missing = [p for p in problems if isinstance(p, MissingSourceTopic)]
    if not create or not missing or len(missing) != len(problems):
        return SourceTopicsReport(tuple(problems), already_there=_found(declared, existing))
    made = await create_topics(
        bootstrap,
        [s for s in declared.sources if s.name not in existing],
        replication_factor=replication_factor,
        timeout_s=timeout_s,
    )
    # CreateTopics answers once the controller has the topic; the broker that answers the
    # next metadata request may learn of it a moment later.
    names = {m.topic for m in missing}
    for _attempt in range(40):
        existing = await read_partition_counts(bootstrap, wanted, timeout_s=timeout_s)
        if names <= existing.keys():
            break
        await asyncio.sleep(0.25)
    problems = find_problems(declared, existing)
    created = {t.name for t in made.created}
    return SourceTopicsReport(
        tuple(problems),
        created=made.created,
        already_there=tuple(
            (name, n) for name, n in _found(declared, existing) if name not in created
        ),
    )


def _found(declared: DeclaredTopics, existing: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple((s.name, existing[s.name]) for s in declared.sources if s.name in existing)
