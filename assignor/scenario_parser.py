"""`parse_scenario`: the JSON object of docs/assignment-rules.md in, a `Scenario` out.

Everything the contract calls bad input raises `ScenarioError` naming the field
path; so does a partition count above `MAX_PARTITIONS_PER_TOPIC` (1,000,000)
or counts adding up to more than `MAX_PARTITIONS_TOTAL` (2,000,000): far beyond
what Kafka runs, and a plan of that size would exhaust memory instead.

Stale facts are dropped and counted in ``stale_claims``: a subscription
topic, owned partition, offset or end offset naming a topic that does not exist
or a partition beyond its count. Conflicting active claims are resolved here,
once, for every strategy (`assignor.claim_conflicts`), and each dropped claim is
counted in ``conflicting_claims``.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import repeat
from typing import Any

from assignor.claim_conflicts import resolve_conflicts
from assignor.errors import ScenarioError
from assignor.model import PROTOCOLS, Claims, Member, Offsets, Scenario
from assignor.scenario_fields import (
    INT_ONLY,
    STR_ONLY,
    as_integer,
    as_list,
    as_mapping,
    as_string,
    field_error,
    join_path,
    partition_key,
    partition_numbers,
    reject_unknown_keys,
    type_name,
)
from assignor.union_find import UnionFind

__all__ = ["MAX_PARTITIONS_PER_TOPIC", "MAX_PARTITIONS_TOTAL", "parse_scenario"]

#: The most partitions a topic may have in a scenario. Far above anything Kafka
#: runs (the usual guidance is a few thousand partitions per broker; KRaft
#: clusters have been shown with about two million in all), yet low enough that
#: a typo such as ``10**14`` is refused by name instead of exhausting memory: a
#: plan allocates per partition.
MAX_PARTITIONS_PER_TOPIC = 1_000_000
#: The most partitions of all topics of one scenario together. Many topics at
#: the per-topic limit would still exhaust memory (a plan holds a few hundred
#: bytes per stateful task: about 250 MB and 3 s per million), so the sum is
#: bounded too, at about what a whole KRaft cluster has been shown to hold.
MAX_PARTITIONS_TOTAL = 2_000_000

_SCENARIO_KEYS = frozenset(
    {
        "topics",
        "changelog_topics",
        "copartitioned",
        "num_standbys",
        "acceptable_recovery_lag",
        "max_warmup_replicas",
        "protocol",
        "members",
        "end_offsets",
    }
)
_MEMBER_KEYS = frozenset(
    {
        "client_id",
        "host",
        "rack",
        "capacity",
        "subscription",
        "generation",
        "owned_active",
        "owned_standby",
        "owned_warmup",
        "offsets",
        "kept_active",
    }
)


class _StaleCounter:
    """Counts facts dropped because they name what no longer exists."""

    def __init__(self) -> None:
        self.count = 0


def _parse_topics(raw: object) -> dict[str, int]:
    topics: dict[str, int] = {}
    total = 0
    for name, count in as_mapping(raw, "topics").items():
        name = as_string(name, "topics")
        count = as_integer(count, f"topics.{name}", minimum=1, what="partition count")
        if count > MAX_PARTITIONS_PER_TOPIC:
            raise field_error(
                f"topics.{name}",
                f"partition count {count} is above the limit of "
                f"{MAX_PARTITIONS_PER_TOPIC:,} partitions per topic",
            )
        topics[name] = count
        total += count
    if total > MAX_PARTITIONS_TOTAL:
        raise field_error(
            "topics",
            f"{total:,} partitions in all topics together is above the limit of "
            f"{MAX_PARTITIONS_TOTAL:,} per scenario",
        )
    return topics


def _known_topic_list(raw: object, path: str, topics: Mapping[str, int]) -> list[str]:
    names: list[str] = []
    for index, item in enumerate(as_list(raw, path)):
        name = as_string(item, f"{path}[{index}]")
        if name not in topics:
            raise field_error(f"{path}[{index}]", f"topic {name!r} is not in topics")
        names.append(name)
    return names


def _check_declared_groups(groups: list[list[str]], topics: Mapping[str, int]) -> None:
    """Declared groups merge transitively; every merged group needs one count."""
    sets = UnionFind()
    for group in groups:
        for topic in group:
            sets.union(group[0], topic)
    merged = sets.sets()
    for index, group in enumerate(groups):
        if not group:
            continue
        members = sorted(merged[sets.find(group[0])])
        if len({topics[t] for t in members}) > 1:
            counts = ", ".join(f"{t} has {topics[t]}" for t in members)
            raise field_error(
                f"copartitioned[{index}]",
                f"co-partitioned topics must have the same partition count: {counts}",
            )


def _parse_claims(
    raw: object, path: str, topics: Mapping[str, int], stale: _StaleCounter
) -> Claims:
    owned: Claims = {}
    for topic, partitions in as_mapping(raw, path).items():
        topic = as_string(topic, path)
        listed = (
            partitions  # the common case: a list of plain ints (checked >= 0 once sorted)
            if type(partitions) is list and INT_ONLY.issuperset(map(type, partitions))
            else partition_numbers(partitions, path, topic)
        )
        numbers = sorted(set(listed))
        if numbers and numbers[0] < 0:  # a negative partition: the full check names it
            partition_numbers(partitions, path, topic)
        count = topics.get(topic)
        if count is None:
            stale.count += len(listed)
            continue
        # One range check per topic (the last is the highest); filter only when it fails.
        if numbers and numbers[-1] >= count:
            live = [n for n in numbers if n < count]
            stale.count += len(numbers) - len(live)
            numbers = live
        if numbers:
            owned[topic] = tuple(numbers)
    return owned if len(owned) < 2 else dict(sorted(owned.items()))


def _offset_entries(raw: Mapping[Any, Any], path: str, topic: str) -> dict[int, int]:
    """Offsets of ``path.topic``, keyed by partition number; the path is built only for an error."""
    try:  # the fast, common case: "0": 1500, ...
        entries = dict(zip(map(int, raw.keys(), repeat(10)), raw.values(), strict=True))
        if (
            len(entries) == len(raw)
            and INT_ONLY.issuperset(map(type, entries.values()))
            and min(entries.values(), default=0) >= 0
            and min(entries, default=0) >= 0
        ):
            return entries
    except (TypeError, ValueError):
        pass
    checked: dict[int, int] = {}
    where = join_path(path, topic)
    for key, offset in raw.items():
        entry_path = f"{where}.{key}"
        number = partition_key(key, entry_path)
        checked[number] = as_integer(offset, entry_path, minimum=0, what="offset")
    return checked


def _parse_offsets(
    raw: object, path: str, topics: Mapping[str, int], stale: _StaleCounter
) -> Offsets:
    offsets: Offsets = {}
    for topic, by_partition in as_mapping(raw, path).items():
        topic = as_string(topic, path)
        if type(by_partition) is dict:
            entries = _offset_entries(by_partition, path, topic)
        else:
            topic_path = join_path(path, topic)
            entries = _offset_entries(as_mapping(by_partition, topic_path), path, topic)
        count = topics.get(topic)
        if count is None:
            stale.count += len(entries)
            continue
        # One range check per topic; filter entry by entry only when it fails.
        live = (
            entries
            if max(entries, default=-1) < count
            else {p: o for p, o in entries.items() if p < count}
        )
        stale.count += len(entries) - len(live)
        if live:
            offsets[topic] = live
    return offsets


def _parse_member(
    member_id: str, raw: object, topics: Mapping[str, int], stale: _StaleCounter
) -> Member:
    # Every field is checked in C-speed fast paths first; the field path for
    # an error message is only built when a check fails. A thousand members
    # are parsed per plan, so per-field f-strings showed in profiles.
    path = f"members.{member_id}"
    fields = as_mapping(raw, path)
    if not _MEMBER_KEYS.issuperset(fields):
        reject_unknown_keys(fields, _MEMBER_KEYS, path)
    if "subscription" not in fields:
        raise field_error(f"{path}.subscription", "required field is missing")
    listed = fields["subscription"]
    if type(listed) is list and STR_ONLY.issuperset(map(type, listed)):
        known = [name for name in listed if name in topics]
        stale.count += len(listed) - len(known)
        subscription = set(known)
    else:
        subscription = set()
        for index, item in enumerate(as_list(listed, f"{path}.subscription")):
            name = as_string(item, f"{path}.subscription[{index}]")
            if name in topics:
                subscription.add(name)
            else:
                stale.count += 1
    client_id = fields.get("client_id", member_id)
    if type(client_id) is not str:
        client_id = as_string(client_id, f"{path}.client_id")
    host = fields.get("host")
    if host is not None and type(host) is not str:
        host = as_string(host, f"{path}.host")
    rack = fields.get("rack")
    if rack is not None and type(rack) is not str:
        rack = as_string(rack, f"{path}.rack")
    capacity = fields.get("capacity", 1)
    if type(capacity) is not int or capacity < 1:
        capacity = as_integer(capacity, f"{path}.capacity", minimum=1)
    generation = fields.get("generation", -1)
    if type(generation) is not int or generation < -1:
        generation = as_integer(generation, f"{path}.generation", minimum=-1)
    owned: list[Claims] = []
    for key in ("owned_active", "owned_standby", "owned_warmup"):
        claims = fields.get(key)
        owned.append(
            {}
            if claims is None and key not in fields
            else _parse_claims(claims, f"{path}.{key}", topics, stale)
        )
    offsets = fields.get("offsets")
    kept = fields.get("kept_active")
    return Member(
        member_id=member_id,
        client_id=client_id,
        host=host,
        rack=rack,
        capacity=capacity,
        subscription=tuple(sorted(subscription)),
        generation=generation,
        owned_active=owned[0],
        owned_standby=owned[1],
        offsets={}
        if offsets is None and "offsets" not in fields
        else _parse_offsets(offsets, f"{path}.offsets", topics, stale),
        # Its stale partitions are counted once, in owned_active, where the member claims them.
        kept_active={}
        if kept is None
        else _parse_claims(kept, f"{path}.kept_active", topics, _StaleCounter()),
        owned_warmup=owned[2],
    )


def _complete_end_offsets(
    given: Offsets, members: Mapping[str, Member], changelogs: frozenset[str]
) -> Offsets:
    """Where the scenario gives no end offset, the highest reported offset stands in."""
    end: Offsets = {topic: dict(by_partition) for topic, by_partition in given.items()}
    for member in members.values():
        for topic, by_partition in member.offsets.items():
            if topic not in changelogs:
                continue
            known = given.get(topic, {})
            target = end.setdefault(topic, {})
            # Set difference in C, iterating the member's few partitions (not
            # `keys() - keys()`, which iterates the right side): usually the
            # scenario gives every end offset.
            for partition in set(by_partition).difference(known):
                offset = by_partition[partition]
                if offset > target.get(partition, -1):
                    target[partition] = offset
    return end


def parse_scenario(raw: Mapping[str, Any] | object) -> Scenario:
    """Validate a scenario mapping (parsed JSON) and return the typed `Scenario`.

    Raises `ScenarioError` for bad input (see docs/assignment-rules.md); drops and
    counts stale facts; resolves conflicting active claims by generation.
    Passing an already parsed `Scenario` returns it unchanged.
    """
    if isinstance(raw, Scenario):
        return raw
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"scenario: must be a JSON object, got {type_name(raw)}")
    reject_unknown_keys(raw, _SCENARIO_KEYS, "")
    for required in ("topics", "members"):
        if required not in raw:
            raise field_error(required, "required field is missing")

    topics = _parse_topics(raw["topics"])
    changelogs = frozenset(
        _known_topic_list(raw.get("changelog_topics", []), "changelog_topics", topics)
    )
    declared: list[list[str]] = []
    for index, group in enumerate(as_list(raw.get("copartitioned", []), "copartitioned")):
        declared.append(_known_topic_list(group, f"copartitioned[{index}]", topics))
    _check_declared_groups(declared, topics)

    num_standbys = as_integer(raw.get("num_standbys", 0), "num_standbys", minimum=0)
    lag = as_integer(
        raw.get("acceptable_recovery_lag", 10000), "acceptable_recovery_lag", minimum=0
    )
    # Like Kafka Streams' max.warmup.replicas: at least one, or a task held
    # back for a member that is not caught up could never move.
    warmups = as_integer(raw.get("max_warmup_replicas", 2), "max_warmup_replicas", minimum=1)
    protocol = as_string(raw.get("protocol", "eager"), "protocol")
    if protocol not in PROTOCOLS:
        raise field_error("protocol", f"must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")

    stale = _StaleCounter()
    parsed: dict[str, Member] = {}
    raw_members = as_mapping(raw["members"], "members")
    for member_id in sorted(raw_members, key=str):
        member_id = as_string(member_id, "members")
        parsed[member_id] = _parse_member(member_id, raw_members[member_id], topics, stale)
    members, conflicts = resolve_conflicts(parsed)

    given_end = _parse_offsets(raw.get("end_offsets", {}), "end_offsets", topics, stale)
    end_offsets = _complete_end_offsets(given_end, members, changelogs)

    return Scenario(
        topics=dict(sorted(topics.items())),
        changelog_topics=changelogs,
        copartitioned=tuple(tuple(group) for group in declared),
        num_standbys=num_standbys,
        acceptable_recovery_lag=lag,
        max_warmup_replicas=warmups,
        protocol=protocol,
        members=members,
        end_offsets=end_offsets,
        stale_claims=stale.count,
        conflicting_claims=conflicts,
    )
