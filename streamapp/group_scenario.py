"""Between the group protocol and `assignor.plan`: member metadata in, per-member shares out.

Pure translation, no decisions: which member gets what is `assignor.plan`'s alone. The leader's
adapter gathers the facts (partition counts from the cluster, each member's decoded metadata)
and hands them here; the result comes back as one `MemberAssignment` per member.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
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


def next_generation(members: Iterable[MemberFacts]) -> int:
    """The generation this plan's claims will carry: newer than every claim it was given."""
    return 1 + max((max(0, m.metadata.generation) for m in members if m.metadata), default=0)


def build_scenario(
    *,
    topics: Mapping[str, int],
    changelog_topics: Iterable[str],
    members: Mapping[str, MemberFacts],
    settings: GroupSettings,
) -> dict[str, Any]:
    """The plan.md scenario for this group; ``topics`` holds only topics that exist."""
    changelogs = sorted(t for t in set(changelog_topics) if t in topics)
    return {
        "topics": dict(sorted(topics.items())),
        "changelog_topics": changelogs,
        "end_offsets": _end_offsets(changelogs, members.values()),
        "num_standbys": settings.num_standbys,
        "acceptable_recovery_lag": settings.acceptable_recovery_lag,
        "max_warmup_replicas": settings.max_warmup_replicas,
        "members": {
            member_id: _member(member_id, facts) for member_id, facts in sorted(members.items())
        },
    }


def _end_offsets(changelogs: Sequence[str], members: Iterable[MemberFacts]) -> dict[str, Any]:
    """Each changelog partition's end: the furthest any member saw or applied.

    A replica's last seen end covers a crashed active's writes that no member applied; an
    active's own applied offset covers the writes since its replicas last looked.
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
    return {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(end.items())}


def _member(member_id: str, facts: MemberFacts) -> dict[str, Any]:
    entry: dict[str, Any] = {"subscription": sorted(set(facts.subscription))}
    meta = facts.metadata
    if meta is None:
        entry["client_id"] = member_id
        return entry
    entry.update(
        client_id=meta.client_id,
        capacity=meta.capacity,
        generation=meta.generation,
        owned_active=_lists(meta.owned_active),
        owned_standby=_lists(meta.owned_standby),
        offsets={t: {str(p): o for p, o in parts.items()} for t, parts in meta.offsets.items()},
    )
    if meta.host is not None:
        entry["host"] = meta.host
    if meta.rack is not None:
        entry["rack"] = meta.rack
    return entry


def shares_from_result(
    result: Mapping[str, Any], *, generation: int, urls: Mapping[str, str]
) -> dict[str, MemberAssignment]:
    """Each member's share of ``result``, with the whole group's active map for Faust's router."""
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
