"""Between the group protocol and `assignor.plan`: member metadata in, per-member shares out.

Pure translation, no decisions: which member gets what is `assignor.plan`'s alone. The leader's
adapter gathers the facts (partition counts from the cluster, each member's decoded metadata,
the changelog end offsets the broker gave) and hands them here; the result comes back as one
`MemberAssignment` per member.

Members' metadata is what they say, not what is so. Before it becomes a scenario, what the
leader can check is checked (`check_facts`): an offset above the broker's end of its changelog
is cut down to that end (or does not count, once found false), claims made at a generation the
group never had are dropped, and a member caught in both is left out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from assignor.metadata_codec import MemberAssignment, MemberMetadata


@dataclass(frozen=True)
class MemberFacts:
    """One member as the leader sees it: its subscription and, if readable, its metadata."""

    subscription: Sequence[str]
    metadata: MemberMetadata | None  # None: unreadable, so a fresh member with no state


@dataclass(frozen=True)
class GroupSettings:
    num_standbys: int
    acceptable_recovery_lag: int
    max_warmup_replicas: int


#: changelog topic -> partition -> offset
TopicOffsets = Mapping[str, Mapping[int, int]]


@dataclass(frozen=True)
class CheckedFacts:
    """The members as the leader can vouch for them, and what it had to correct on the way."""

    #: The facts to plan with: offsets at most the broker's end, no claims above the group's
    #: generation; members in ``refused`` are not here.
    members: dict[str, MemberFacts]
    #: member id -> topic -> partition -> the offset it reported above the broker's end
    #: (``members`` carries the end instead, or no offset if it is in ``offsets_not_counted``).
    offsets_beyond_end: dict[str, dict[str, dict[int, int]]]
    #: member id -> the generation it claimed, above every one the group has had (its
    #: ``owned_*`` claims are left out of ``members``).
    claims_above_generation: dict[str, int]
    #: member id -> topic -> partitions whose reported offset is known to be false (it stayed
    #: above the broker's end): no local state counts there for it, and none of its claims.
    offsets_not_counted: dict[str, dict[str, list[int]]]
    #: Members caught in both lies: a generation the group never had, and offsets the broker
    #: does not have. Nothing they said holds; they get no work.
    refused: frozenset[str]
    #: member id -> topic -> partitions it kept processing through this join (cooperative), as
    #: it claims them, whatever was dropped above: a claim the plan does not trust for
    #: stickiness is still a partition no other member may get until that member gave it up.
    kept_active: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    @property
    def offsets_beyond_end_count(self) -> int:
        """Member-reported partition offsets above the broker's end (as the leader knew it)."""
        return sum(len(ps) for topics in self.offsets_beyond_end.values() for ps in topics.values())


def check_facts(
    members: Mapping[str, MemberFacts],
    *,
    broker_ends: TopicOffsets,
    group_generation: int | None,
    false_offsets: Mapping[str, Collection[tuple[str, int]]] | None = None,
) -> CheckedFacts:
    """Each member's metadata, held against what the leader knows from elsewhere.

    ``broker_ends``: changelog end offsets the broker gave, read a little before this rebalance
    (partitions it has not given yet are left as the members report them). A member cannot have
    applied records its changelog does not have, so an offset above the end is cut down to the
    end: it is "caught up", never more. (An honest member can be above the end as last read,
    by what it wrote since; whether a report was false is known only later, from ends read
    again: ``false_offsets``, member -> (topic, partition) pairs found false, which count as no
    local state at all while the member reports them above the end, and its claims are dropped.)

    ``group_generation``: the highest generation the leader has seen for this group (``None``:
    none yet, every claim counts). A claim above it was made in no plan of this group: the
    member's ``owned_active``, ``owned_standby`` and warmups are dropped, as stale claims are,
    and what it has on disk (its offsets) still counts.

    A member caught in both at once, a generation above the group's and an offset above the
    broker's end, is `refused`: no honest member of this group's history says either (a member
    that wrote since the ends were read has a generation of this group).
    """
    checked: dict[str, MemberFacts] = {}
    beyond: dict[str, dict[str, dict[int, int]]] = {}
    above: dict[str, int] = {}
    not_counted: dict[str, dict[str, list[int]]] = {}
    refused: set[str] = set()
    kept_through_join: dict[str, dict[str, list[int]]] = {}
    known_false = false_offsets or {}
    for member_id, facts in members.items():
        meta = facts.metadata
        if meta is None:
            checked[member_id] = facts
            continue
        if meta.kept_owned and meta.owned_active:
            kept_through_join[member_id] = _lists(meta.owned_active)
        false_here = set(known_false.get(member_id, ()))
        offsets: dict[str, dict[int, int]] = {}
        for topic, parts in meta.offsets.items():
            ends = broker_ends.get(topic, {})
            kept: dict[int, int] = {}
            for p, offset in sorted(parts.items()):
                end = ends.get(p)
                if end is None or offset <= end:
                    kept[p] = offset
                    continue
                beyond.setdefault(member_id, {}).setdefault(topic, {})[p] = offset
                if (topic, p) in false_here:
                    not_counted.setdefault(member_id, {}).setdefault(topic, []).append(p)
                else:
                    kept[p] = end
            if kept:
                offsets[topic] = kept
        if member_id in beyond:
            meta = replace(meta, offsets=offsets)
        if member_id in not_counted:
            # An owner's store is where its changelog's records come from: one that claims a
            # task while its state is false holds it only to sit on it.
            meta = replace(meta, owned_active={}, owned_standby={}, incoming={}, warmup={})
        if group_generation is not None and meta.generation > group_generation:
            above[member_id] = meta.generation
            if member_id in beyond:
                refused.add(member_id)
                continue
            meta = replace(
                meta, generation=-1, owned_active={}, owned_standby={}, incoming={}, warmup={}
            )
        checked[member_id] = facts if meta is facts.metadata else replace(facts, metadata=meta)
    return CheckedFacts(
        checked,
        beyond,
        above,
        not_counted,
        frozenset(refused),
        {m: claims for m, claims in kept_through_join.items() if m not in refused},
    )


def next_generation(members: Iterable[MemberFacts]) -> int:
    """The generation this plan's claims will carry: newer than every claim it was given."""
    return 1 + max((max(0, m.metadata.generation) for m in members if m.metadata), default=0)


def rebalance_protocols(members: Iterable[MemberFacts]) -> tuple[str, str]:
    """The protocol to plan this rebalance with, and the one members run the next one with.

    The group runs cooperative (KIP-429) only once every member speaks it: until then every
    member, cooperative ones too, gives up all it owns before it joins (eager), so a rolling
    upgrade never has a member keep a partition the plan hands straight to another. This
    rebalance is planned cooperatively all the same when a member kept its partitions through
    the join (the group ran cooperative and an eager member has just joined): a partition it
    keeps that moves is then withheld from its new owner for one round, as in any cooperative
    plan, and the next rebalance is eager for everyone.
    """
    readable = [m.metadata for m in members if m.metadata is not None]
    everyone = bool(readable) and all(m.protocol == "cooperative" for m in readable)
    kept = any(m.kept_owned for m in readable)
    return ("cooperative" if everyone or kept else "eager"), (
        "cooperative" if everyone else "eager"
    )


def build_scenario(
    *,
    topics: Mapping[str, int],
    changelog_topics: Iterable[str],
    members: Mapping[str, MemberFacts],
    settings: GroupSettings,
    broker_ends: TopicOffsets | None = None,
    protocol: str = "eager",
    kept_active: Mapping[str, Mapping[str, Sequence[int]]] | None = None,
) -> dict[str, Any]:
    """The plan.md scenario for this group; ``topics`` holds only topics that exist.

    ``members`` should have been through `check_facts` with the same ``broker_ends``.
    ``protocol``: "eager", or "cooperative" (see `rebalance_protocols`); a cooperative scenario
    carries each member's ``kept_active`` (`CheckedFacts.kept_active`), which the plan's
    withholding reads unchecked.
    """
    changelogs = sorted(t for t in set(changelog_topics) if t in topics)
    scenario: dict[str, Any] = {
        "topics": dict(sorted(topics.items())),
        "changelog_topics": changelogs,
        "end_offsets": _end_offsets(changelogs, members.values(), broker_ends or {}),
        "num_standbys": settings.num_standbys,
        "acceptable_recovery_lag": settings.acceptable_recovery_lag,
        "max_warmup_replicas": settings.max_warmup_replicas,
        "members": {
            member_id: _member(member_id, facts) for member_id, facts in sorted(members.items())
        },
    }
    if protocol != "eager":
        scenario["protocol"] = protocol
        for member_id, claims in (kept_active or {}).items():
            entry = scenario["members"].get(member_id)
            if entry is not None and claims:
                entry["kept_active"] = _lists(claims)
    return scenario


def _end_offsets(
    changelogs: Sequence[str], members: Iterable[MemberFacts], broker_ends: TopicOffsets
) -> dict[str, Any]:
    """Each changelog partition's end: the broker's, where the leader has it.

    Where it has none yet (a leader that has just started), the furthest any member saw or
    applied stands in: a replica's last seen end covers a crashed active's writes that no member
    applied; an active's own applied offset covers the writes since its replicas last looked.
    Members' word is taken only there: one member's wrong end would make every other member
    look behind, and parked warmups could never catch up.
    """
    wanted = set(changelogs)
    end: dict[str, dict[int, int]] = {}
    for facts in members:
        meta = facts.metadata
        if meta is None:
            continue
        for known in (meta.changelog_ends, meta.offsets):
            for topic, parts in known.items():
                if topic not in wanted:
                    continue
                by_partition = end.setdefault(topic, {})
                for p, offset in parts.items():
                    if offset > by_partition.get(p, -1):
                        by_partition[p] = offset
    for topic, parts in broker_ends.items():
        if topic in wanted:
            end.setdefault(topic, {}).update(parts)
    return {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(end.items())}


def _member(member_id: str, facts: MemberFacts) -> dict[str, Any]:
    entry: dict[str, Any] = {"subscription": sorted(set(facts.subscription))}
    meta = facts.metadata
    if meta is None:
        entry["client_id"] = member_id
        return entry
    # A partition the last plan meant for this member but withheld for a round is claimed like
    # one it owns, so this plan places it where the last one decided. Its kept partitions
    # (``kept_active``) stay those it really owns.
    claimed = {t: list(ps) for t, ps in meta.owned_active.items()}
    for topic, partitions in meta.incoming.items():
        claimed[topic] = sorted({*claimed.get(topic, ()), *partitions})
    entry.update(
        client_id=meta.client_id,
        capacity=meta.capacity,
        generation=meta.generation,
        owned_active=_lists(claimed),
        owned_standby=_lists(meta.owned_standby),
        offsets={t: {str(p): o for p, o in parts.items()} for t, parts in meta.offsets.items()},
    )
    if any(meta.warmup.values()):
        entry["owned_warmup"] = _lists(meta.warmup)
    if meta.host is not None:
        entry["host"] = meta.host
    if meta.rack is not None:
        entry["rack"] = meta.rack
    return entry


def shares_from_result(
    result: Mapping[str, Any],
    *,
    generation: int,
    urls: Mapping[str, str],
    group_protocol: str = "eager",
) -> dict[str, MemberAssignment]:
    """Each member's share of ``result``, with the whole group's active map for Faust's router.

    ``group_protocol``: the protocol members run the next rebalance with (`rebalance_protocols`).
    """
    members: Mapping[str, Mapping[str, Mapping[str, list[int]]]] = result["members"]
    actives_by_url: dict[str, dict[str, list[int]]] = {}
    for member_id, share in members.items():
        by_topic = actives_by_url.setdefault(urls[member_id], {})
        for topic, partitions in share.get("active", {}).items():
            by_topic[topic] = sorted({*by_topic.get(topic, []), *partitions})
    topic_groups = {
        topic: index for index, group in enumerate(result["groups"]) for topic in group["topics"]
    }
    warmups = sum(len(ps) for share in members.values() for ps in share.get("warmup", {}).values())
    incoming: Mapping[str, Mapping[str, list[int]]] = result.get("incoming", {})
    return {
        member_id: MemberAssignment(
            generation=generation,
            active=_lists(share.get("active", {})),
            standby=_lists(share.get("standby", {})),
            warmup=_lists(share.get("warmup", {})),
            followup_rebalance=bool(result.get("followup_rebalance", False)),
            warmups_in_group=warmups,
            actives_by_url=actives_by_url,
            topic_groups=topic_groups,
            group_protocol=group_protocol,
            incoming=_lists(incoming.get(member_id, {})),
        )
        for member_id, share in members.items()
    }


def with_global_tables(
    shares: Mapping[str, MemberAssignment], global_changelogs: Mapping[str, int]
) -> dict[str, MemberAssignment]:
    """Every member holds every partition of a global table's changelog active (Faust's rule).

    Global tables are left out of the plan: they are not placed, they are everywhere.
    """
    if not global_changelogs:
        return dict(shares)
    everything = {topic: list(range(n)) for topic, n in global_changelogs.items()}
    return {
        member_id: replace(share, active={**share.active, **everything})
        for member_id, share in shares.items()
    }


def kafka_partitions(share: MemberAssignment) -> list[tuple[str, list[int]]]:
    """What the member consumes: its actives, and the changelogs its replicas replay."""
    merged: dict[str, set[int]] = {}
    for part in (share.active, share.standby, share.warmup):
        for topic, partitions in part.items():
            merged.setdefault(topic, set()).update(partitions)
    return [(topic, sorted(ps)) for topic, ps in sorted(merged.items()) if ps]


def _lists(tps: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    return {topic: sorted(ps) for topic, ps in sorted(tps.items()) if ps}
