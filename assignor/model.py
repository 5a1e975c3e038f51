"""The scenario model: typed, validated facts that every strategy decides on.

`parse_scenario(mapping) -> Scenario` turns the JSON object of
docs/assignment-rules.md into frozen dataclasses:

- `Scenario`: ``topics`` (name -> partition count), ``changelog_topics``,
  ``copartitioned`` (declared groups, as given), ``num_standbys``,
  ``acceptable_recovery_lag``, ``max_warmup_replicas``, ``protocol``
  (``"eager"`` | ``"cooperative"``), ``members`` (member id -> `Member`, in
  member-id order), ``end_offsets`` (changelog topic -> partition -> offset,
  already completed with the highest offset any member reports where the
  scenario gave none), ``stale_claims`` and ``conflicting_claims`` (counts of
  facts that were dropped, see below).
- `Member`: ``member_id``, ``client_id``, ``host``, ``rack``, ``capacity``,
  ``subscription`` (sorted tuple), ``generation``, ``owned_active`` and
  ``owned_standby`` (topic -> sorted tuple of partitions), ``offsets``
  (topic -> partition -> offset), ``owned_warmup`` (changelog topic -> partitions
  it replayed as warmups in that generation; only the choice of which task a holder
  gives up reads it), ``kept_active`` (cooperative: what it kept processing through
  the join, unchecked; only the withholding reads it).

Everything the contract calls bad input raises `ScenarioError` naming the field
path; so does a partition count above `MAX_PARTITIONS_PER_TOPIC` (1,000,000)
or counts adding up to more than `MAX_PARTITIONS_TOTAL` (2,000,000): far beyond
what Kafka runs, and a plan of that size would exhaust memory instead.

Stale facts are dropped and counted in ``stale_claims``: a subscription
topic, owned partition, offset or end offset naming a topic that does not exist
or a partition beyond its count. Conflicting active claims are resolved here,
once, for every strategy: the claim with the highest ``generation`` wins; when
several members claim a partition in the same (highest) generation, nobody
wins (Kafka's sticky assignor does the same: the claim cannot be trusted), and
each dropped claim is counted in ``conflicting_claims``; a claim that lost on
generation is kept apart in the member's ``superseded_active`` (a hint of
where state lives, never ownership). A member claiming a
partition both active and standby keeps only the active claim.

Mappings in these dataclasses are plain dicts for speed; treat them as
read-only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, cast

from assignor.errors import ScenarioError
from assignor.union_find import UnionFind

__all__ = [
    "MAX_PARTITIONS_PER_TOPIC",
    "MAX_PARTITIONS_TOTAL",
    "PROTOCOLS",
    "Claims",
    "Member",
    "Offsets",
    "Scenario",
    "TopicPartitions",
    "parse_scenario",
]

PROTOCOLS = ("eager", "cooperative")

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

#: topic -> partitions, read-only: what any caller may pass or read
TopicPartitions = Mapping[str, Sequence[int]]
#: topic -> sorted partitions, as a member claims them (owned or superseded)
Claims = dict[str, tuple[int, ...]]
#: topic -> partition -> changelog offset
Offsets = dict[str, dict[int, int]]

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


@dataclass(frozen=True, eq=True)
class Member:
    """One group member as its metadata describes it (stale facts removed)."""

    member_id: str
    client_id: str
    host: str | None
    rack: str | None
    capacity: int
    subscription: tuple[str, ...]
    generation: int
    owned_active: Claims = field(hash=False)
    owned_standby: Claims = field(hash=False)
    offsets: Offsets = field(hash=False)
    #: active claims dropped because another member claimed the partition at a
    #: higher generation: what a worker restarted with an old ownership file
    #: ran before. Not trusted as ownership, but a hint of where state lives.
    superseded_active: Claims = field(default_factory=dict, hash=False)
    #: cooperative: the active partitions it kept processing through this rebalance's join, as
    #: it says them (no generation check, no conflict resolution: it is processing them, and
    #: no other member may get one this round). Never ownership for the other rules.
    kept_active: Claims = field(default_factory=dict, hash=False)
    #: the changelog partitions it replayed as warmups in ``generation``: which of its
    #: caught-up tasks it warmed up for, and which it merely still has on disk (an old task's
    #: store looks just as caught up when nobody wrote to it since).
    owned_warmup: Claims = field(default_factory=dict, hash=False)


@dataclass(frozen=True, eq=True)
class Scenario:
    """A validated scenario; see the module docstring for the fields."""

    topics: dict[str, int] = field(hash=False)
    changelog_topics: frozenset[str]
    copartitioned: tuple[tuple[str, ...], ...]
    num_standbys: int
    acceptable_recovery_lag: int
    max_warmup_replicas: int
    protocol: str
    members: dict[str, Member] = field(hash=False)
    end_offsets: Offsets = field(hash=False)
    stale_claims: int = 0
    conflicting_claims: int = 0


# --------------------------------------------------------------------------- helpers


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _fail(path: str, message: str) -> ScenarioError:
    return ScenarioError(f"{path}: {message}")


def _mapping(value: object, path: str) -> Mapping[Any, Any]:
    if type(value) is dict:  # parsed JSON: skips the slower ABC check
        return value
    if not isinstance(value, Mapping):
        raise _fail(path, f"must be an object, got {_type_name(value)}")
    return value


def _list(value: object, path: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise _fail(path, f"must be a list, got {_type_name(value)}")
    return value


def _string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, f"must be a string, got {_type_name(value)}")
    return value


def _optional_string(value: object, path: str) -> str | None:
    return None if value is None else _string(value, path)


def _integer(value: object, path: str, *, minimum: int, what: str = "value") -> int:
    # bool is an int subclass in Python; JSON true is never a count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, f"must be an integer, got {_type_name(value)}")
    if value < minimum:
        raise _fail(path, f"{what} must be at least {minimum}, got {value}")
    return value


def _partition_key(key: object, path: str) -> int:
    """Offsets are keyed by partition number; JSON makes that a string."""
    if isinstance(key, bool):
        raise _fail(path, f"partition must be an integer, got {key!r}")
    if isinstance(key, int):
        number = key
    elif isinstance(key, str):
        try:
            number = int(key, 10)
        except ValueError:
            raise _fail(path, f"partition must be an integer, got {key!r}") from None
    else:
        raise _fail(path, f"partition must be an integer, got {_type_name(key)}")
    if number < 0:
        raise _fail(path, f"partition must be at least 0, got {number}")
    return number


def _reject_unknown_keys(mapping: Mapping[Any, Any], allowed: frozenset[str], path: str) -> None:
    for key in mapping:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            raise _fail(where, "unknown key")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --------------------------------------------------------------------------- parsing


class _StaleCounter:
    """Counts facts dropped because they name what no longer exists."""

    def __init__(self) -> None:
        self.count = 0


def _parse_topics(raw: object) -> dict[str, int]:
    topics: dict[str, int] = {}
    total = 0
    for name, count in _mapping(raw, "topics").items():
        name = _string(name, "topics")
        count = _integer(count, f"topics.{name}", minimum=1, what="partition count")
        if count > MAX_PARTITIONS_PER_TOPIC:
            raise _fail(
                f"topics.{name}",
                f"partition count {count} is above the limit of "
                f"{MAX_PARTITIONS_PER_TOPIC:,} partitions per topic",
            )
        topics[name] = count
        total += count
    if total > MAX_PARTITIONS_TOTAL:
        raise _fail(
            "topics",
            f"{total:,} partitions in all topics together is above the limit of "
            f"{MAX_PARTITIONS_TOTAL:,} per scenario",
        )
    return topics


def _known_topic_list(raw: object, path: str, topics: Mapping[str, int]) -> list[str]:
    names: list[str] = []
    for index, item in enumerate(_list(raw, path)):
        name = _string(item, f"{path}[{index}]")
        if name not in topics:
            raise _fail(f"{path}[{index}]", f"topic {name!r} is not in topics")
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
            raise _fail(
                f"copartitioned[{index}]",
                f"co-partitioned topics must have the same partition count: {counts}",
            )


def _is_plain_count(value: object) -> bool:
    # type() rather than isinstance: bool is an int subclass but never a count.
    return type(value) is int and value >= 0


_INT_ONLY = frozenset({int})
_STR_ONLY = frozenset({str})


def _all_plain_counts(values: Collection[object]) -> bool:
    """Every value a plain int >= 0: one type-set check and one min, both in C."""
    if not _INT_ONLY.issuperset(map(type, values)):
        return False
    ints = cast("Collection[int]", values)  # every value is an int: checked just above
    return min(ints, default=0) >= 0


def _partition_numbers(raw: object, path: str, topic: str) -> list[int] | tuple[int, ...]:
    """The partition list of ``path.topic``; the field path is only built to name an error."""
    if isinstance(raw, list | tuple) and _all_plain_counts(raw):  # the fast, common case
        return raw
    where = _join(path, topic)
    return [
        _integer(p, f"{where}[{i}]", minimum=0, what="partition")
        for i, p in enumerate(_list(raw, where))
    ]


def _parse_claims(
    raw: object, path: str, topics: Mapping[str, int], stale: _StaleCounter
) -> Claims:
    owned: Claims = {}
    for topic, partitions in _mapping(raw, path).items():
        topic = _string(topic, path)
        listed = (
            partitions  # the common case: a list of plain ints (checked >= 0 once sorted)
            if type(partitions) is list and _INT_ONLY.issuperset(map(type, partitions))
            else _partition_numbers(partitions, path, topic)
        )
        numbers = sorted(set(listed))
        if numbers and numbers[0] < 0:  # a negative partition: the full check names it
            _partition_numbers(partitions, path, topic)
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
            and _INT_ONLY.issuperset(map(type, entries.values()))
            and min(entries.values(), default=0) >= 0
            and min(entries, default=0) >= 0
        ):
            return entries
    except (TypeError, ValueError):
        pass
    checked: dict[int, int] = {}
    where = _join(path, topic)
    for key, offset in raw.items():
        entry_path = f"{where}.{key}"
        number = _partition_key(key, entry_path)
        checked[number] = _integer(offset, entry_path, minimum=0, what="offset")
    return checked


def _parse_offsets(
    raw: object, path: str, topics: Mapping[str, int], stale: _StaleCounter
) -> Offsets:
    offsets: Offsets = {}
    for topic, by_partition in _mapping(raw, path).items():
        topic = _string(topic, path)
        if type(by_partition) is dict:
            entries = _offset_entries(by_partition, path, topic)
        else:
            topic_path = _join(path, topic)
            entries = _offset_entries(_mapping(by_partition, topic_path), path, topic)
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
    fields = _mapping(raw, path)
    if not _MEMBER_KEYS.issuperset(fields):
        _reject_unknown_keys(fields, _MEMBER_KEYS, path)
    if "subscription" not in fields:
        raise _fail(f"{path}.subscription", "required field is missing")
    listed = fields["subscription"]
    if type(listed) is list and _STR_ONLY.issuperset(map(type, listed)):
        known = [name for name in listed if name in topics]
        stale.count += len(listed) - len(known)
        subscription = set(known)
    else:
        subscription = set()
        for index, item in enumerate(_list(listed, f"{path}.subscription")):
            name = _string(item, f"{path}.subscription[{index}]")
            if name in topics:
                subscription.add(name)
            else:
                stale.count += 1
    client_id = fields.get("client_id", member_id)
    if type(client_id) is not str:
        client_id = _string(client_id, f"{path}.client_id")
    host = fields.get("host")
    if host is not None and type(host) is not str:
        host = _string(host, f"{path}.host")
    rack = fields.get("rack")
    if rack is not None and type(rack) is not str:
        rack = _string(rack, f"{path}.rack")
    capacity = fields.get("capacity", 1)
    if type(capacity) is not int or capacity < 1:
        capacity = _integer(capacity, f"{path}.capacity", minimum=1)
    generation = fields.get("generation", -1)
    if type(generation) is not int or generation < -1:
        generation = _integer(generation, f"{path}.generation", minimum=-1)
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


def _contested_claims(members: dict[str, Member]) -> dict[tuple[str, int], list[Member]]:
    """Active partitions claimed by more than one member, with their claimants in order.

    Claims are first recorded per topic as partition -> first claimant, a
    whole list at a time; only partitions claimed again get a claimant list.
    """
    first: dict[str, dict[int, Member]] = {}
    contested: dict[tuple[str, int], list[Member]] = {}
    for member in members.values():
        for topic, partitions in member.owned_active.items():
            claimed = first.setdefault(topic, {})
            if claimed.keys().isdisjoint(partitions):  # the common case, no set built
                claimed.update(dict.fromkeys(partitions, member))
                continue
            again = claimed.keys() & partitions
            if again:
                for partition in sorted(again):
                    contested.setdefault((topic, partition), [claimed[partition]]).append(member)
                claimed.update((p, member) for p in partitions if p not in again)
            else:
                claimed.update(dict.fromkeys(partitions, member))
    return contested


def _resolve_conflicts(members: dict[str, Member]) -> tuple[dict[str, Member], int]:
    """Keep each active claim only where it is the single highest-generation one."""
    rejected: dict[str, set[tuple[str, int]]] = {}
    superseded: dict[str, set[tuple[str, int]]] = {}
    dropped = 0
    for tp, claim in _contested_claims(members).items():
        best = max(m.generation for m in claim)
        winners = [m for m in claim if m.generation == best]
        for member in claim:
            if len(winners) > 1 or member.generation != best:
                rejected.setdefault(member.member_id, set()).add(tp)
                dropped += 1
            if member.generation != best and len(winners) == 1:
                superseded.setdefault(member.member_id, set()).add(tp)

    resolved: dict[str, Member] = {}
    for member_id, member in members.items():
        lost = rejected.get(member_id)
        overlap = any(
            topic in member.owned_active
            and not set(member.owned_active[topic]).isdisjoint(partitions)
            for topic, partitions in member.owned_standby.items()
        )
        if lost is None and not overlap:  # nothing to drop: the common case
            resolved[member_id] = member
            continue
        lost = lost or set()
        active: Claims = {}
        for topic, partitions in member.owned_active.items():
            kept = tuple(p for p in partitions if (topic, p) not in lost)
            if kept:
                active[topic] = kept
        standby: Claims = {}
        for topic, partitions in member.owned_standby.items():
            # The member's own active claim (even a rejected one) says the
            # standby claim is not a separate copy.
            mine = set(member.owned_active.get(topic, ()))
            kept = tuple(p for p in partitions if p not in mine)
            if kept:
                standby[topic] = kept
        older: Claims = {}
        for topic, p in sorted(superseded.get(member_id, ())):
            older[topic] = (*older.get(topic, ()), p)
        if active != member.owned_active or standby != member.owned_standby or older:
            member = Member(
                member_id=member.member_id,
                client_id=member.client_id,
                host=member.host,
                rack=member.rack,
                capacity=member.capacity,
                subscription=member.subscription,
                generation=member.generation,
                owned_active=active,
                owned_standby=standby,
                offsets=member.offsets,
                superseded_active=older,
                kept_active=member.kept_active,
                owned_warmup=member.owned_warmup,
            )
        resolved[member_id] = member
    return resolved, dropped


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
        raise ScenarioError(f"scenario: must be a JSON object, got {_type_name(raw)}")
    _reject_unknown_keys(raw, _SCENARIO_KEYS, "")
    for required in ("topics", "members"):
        if required not in raw:
            raise _fail(required, "required field is missing")

    topics = _parse_topics(raw["topics"])
    changelogs = frozenset(
        _known_topic_list(raw.get("changelog_topics", []), "changelog_topics", topics)
    )
    declared: list[list[str]] = []
    for index, group in enumerate(_list(raw.get("copartitioned", []), "copartitioned")):
        declared.append(_known_topic_list(group, f"copartitioned[{index}]", topics))
    _check_declared_groups(declared, topics)

    num_standbys = _integer(raw.get("num_standbys", 0), "num_standbys", minimum=0)
    lag = _integer(raw.get("acceptable_recovery_lag", 10000), "acceptable_recovery_lag", minimum=0)
    # Like Kafka Streams' max.warmup.replicas: at least one, or a task held
    # back for a member that is not caught up could never move.
    warmups = _integer(raw.get("max_warmup_replicas", 2), "max_warmup_replicas", minimum=1)
    protocol = _string(raw.get("protocol", "eager"), "protocol")
    if protocol not in PROTOCOLS:
        raise _fail("protocol", f"must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")

    stale = _StaleCounter()
    parsed: dict[str, Member] = {}
    raw_members = _mapping(raw["members"], "members")
    for member_id in sorted(raw_members, key=str):
        member_id = _string(member_id, "members")
        parsed[member_id] = _parse_member(member_id, raw_members[member_id], topics, stale)
    members, conflicts = _resolve_conflicts(parsed)

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
