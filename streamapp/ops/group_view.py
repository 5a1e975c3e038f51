"""`streamapp group`: the whole group as the broker sees it, and what a change would do.

Pure: the broker's answers come in (`DescribedGroup`, the changelogs' end offsets, partition
counts), the view and the what-if go out. The I/O is `streamapp.ops.group_read`'s.

What the broker keeps of a streamapp group is each member's JoinGroup metadata (who it is, where
it runs, the changelog offsets of its local stores when it last joined) and the assignment the
leader gave it (its share of the plan, with the plan's generation). Both are decoded with the
codec the members speak (`assignor.metadata_codec`); nothing here asks a worker.

- **generation** is the plan's generation, carried in every assignment: DescribeGroups does not
  report Kafka's own generation id, and the plan's is the one members claim their tasks by.
- **lag** of a standby or warmup replica is the changelog's end offset now, from the broker,
  minus the offset the member reported for its local store when it last joined (0 when it
  reported none: all of the changelog to replay). Members report offsets only when they join,
  so a replica that replayed since looks further behind here than it is; the worker's own
  ``/streamapp/assignment`` view has its live lag.

The what-if (`what_if`) builds the scenario the group leader would build (`streamapp.
group_scenario.build_scenario`) from these facts, with the change applied, runs `assignor.plan`
on it, and compares the result with the current assignment. Each member is taken to hold what
it holds now (its assignment, at the plan's generation), with its reported offsets, except that
an active's changelog partitions are at the changelog's end: the active is the one writing it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

import assignor
from assignor.faust_names import is_leader_topic
from assignor.metadata_codec import (
    MemberAssignment,
    MemberMetadata,
    MetadataError,
    decode_assignment,
    decode_metadata,
)
from assignor.natural import natural_key
from streamapp.group_scenario import GroupSettings, MemberFacts, build_scenario
from streamapp.partition_assignor import PROTOCOL_NAME

#: topic -> partition -> offset
Offsets = Mapping[str, Mapping[int, int]]


class GroupViewError(ValueError):
    """The group cannot be shown or changed as asked; the message says why, in one line."""


@dataclass(frozen=True)
class RawMember:
    """One member as DescribeGroups returns it: bytes not decoded yet."""

    member_id: str
    kafka_client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class DescribedGroup:
    """One group of a DescribeGroups response."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: Sequence[RawMember]


@dataclass(frozen=True)
class MemberView:
    member_id: str
    client_id: str
    subscription: tuple[str, ...]
    metadata: MemberMetadata | None
    assignment: MemberAssignment | None
    #: Why the metadata or assignment could not be read (the member gets no work then).
    unreadable: str | None = None


@dataclass(frozen=True)
class GroupView:
    group_id: str
    state: str
    protocol: str
    generation: int | None
    members: tuple[MemberView, ...]
    #: changelog topic -> partition -> end offset, from the broker
    end_offsets: Offsets = field(default_factory=dict)

    def lag(self, member: MemberView) -> dict[str, dict[int, int]]:
        """Each standby and warmup partition of ``member``: records behind the changelog's end."""
        if member.assignment is None:
            return {}
        reported = member.metadata.offsets if member.metadata is not None else {}
        out: dict[str, dict[int, int]] = {}
        for part in (member.assignment.standby, member.assignment.warmup):
            for topic, partitions in part.items():
                ends = self.end_offsets.get(topic, {})
                for p in partitions:
                    end = ends.get(p)
                    if end is not None:
                        applied = reported.get(topic, {}).get(p, 0)
                        out.setdefault(topic, {})[p] = max(0, end - applied)
        return {t: dict(sorted(ps.items())) for t, ps in sorted(out.items())}


def read_group(described: DescribedGroup, end_offsets: Offsets | None = None) -> GroupView:
    """Decode every member of ``described``; `GroupViewError` when streamapp does not run it."""
    gid = described.group_id
    if described.state == "Dead" or (not described.members and not described.protocol_type):
        raise GroupViewError(f"consumer group {gid!r} does not exist on this broker")
    if described.protocol_type != "consumer":
        raise GroupViewError(
            f"group {gid!r} is not a consumer group (protocol type "
            f"{described.protocol_type!r}), so no streamapp worker runs it"
        )
    if not described.members:
        raise GroupViewError(
            f"consumer group {gid!r} has no members now (state {described.state}): "
            "no worker runs it; start one with `streamapp worker`"
        )
    if described.protocol != PROTOCOL_NAME:
        raise GroupViewError(
            f"consumer group {gid!r} is run with assignor protocol {described.protocol!r}, "
            f"not streamapp's ({PROTOCOL_NAME!r}), so it is not run by streamapp workers"
        )
    members = tuple(
        sorted(
            (_decode_member(raw) for raw in described.members),
            key=lambda m: (natural_key(m.client_id), m.member_id),
        )
    )
    generations = [m.assignment.generation for m in members if m.assignment is not None]
    return GroupView(
        group_id=gid,
        state=described.state,
        protocol=described.protocol,
        generation=max(generations) if generations else None,
        members=members,
        end_offsets=end_offsets or {},
    )


def _decode_member(raw: RawMember) -> MemberView:
    problems: list[str] = []
    subscription: tuple[str, ...] = ()
    metadata: MemberMetadata | None = None
    assignment: MemberAssignment | None = None
    try:
        protocol_metadata = ConsumerProtocolMemberMetadata.decode(raw.metadata)
        subscription = tuple(sorted(protocol_metadata.subscription))
        metadata = decode_metadata(protocol_metadata.user_data)
    except MetadataError as exc:
        problems.append(str(exc))
    except Exception as exc:  # the consumer protocol's own framing, not streamapp's payload
        problems.append(f"member metadata is not a consumer subscription: {exc!r}")
    if raw.assignment:  # empty while the group is rebalancing
        try:
            protocol_assignment = ConsumerProtocolMemberAssignment.decode(raw.assignment)
            assignment = decode_assignment(protocol_assignment.user_data)
        except MetadataError as exc:
            problems.append(str(exc))
        except Exception as exc:
            problems.append(f"assignment is not a consumer assignment: {exc!r}")
    return MemberView(
        member_id=raw.member_id,
        client_id=metadata.client_id if metadata is not None else raw.kafka_client_id,
        subscription=subscription,
        metadata=metadata,
        assignment=assignment,
        unreadable="; ".join(problems) or None,
    )


def _parts(tps: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    return {t: sorted(ps) for t, ps in sorted(tps.items()) if ps}


def _json_lag(lag: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    return {t: {str(p): n for p, n in ps.items()} for t, ps in lag.items()}


def group_json(view: GroupView) -> dict[str, Any]:
    """The object ``streamapp group --format json`` prints (its shape is a contract)."""
    members = []
    for m in view.members:
        meta, share = m.metadata, m.assignment
        entry: dict[str, Any] = {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "host": meta.host if meta is not None else None,
            "rack": meta.rack if meta is not None else None,
            "capacity": meta.capacity if meta is not None else None,
            "active": _parts(share.active) if share is not None else {},
            "standby": _parts(share.standby) if share is not None else {},
            "warmup": _parts(share.warmup) if share is not None else {},
            "lag": _json_lag(view.lag(m)),
        }
        if m.unreadable is not None:
            entry["unreadable"] = m.unreadable
        members.append(entry)
    return {
        "group": view.group_id,
        "state": view.state,
        "generation": view.generation,
        "protocol": view.protocol,
        "members": members,
    }


# -- the table --

LAG_NOTE = (
    "lag: changelog records a standby or warmup is behind the changelog's end now, counted from "
    "the offset its member reported when it last joined (its worker's /streamapp/assignment "
    "has the live lag)"
)


def _partition_list(partitions: Sequence[int]) -> str:
    return ",".join(str(p) for p in partitions)


def _share_lines(kind: str, tps: Mapping[str, Sequence[int]], lag: Offsets) -> list[str]:
    if not tps:
        return [f"  {kind:<8} -"]
    lines = []
    for topic, partitions in sorted(tps.items()):
        if not partitions:
            continue
        known = lag.get(topic, {})
        shown = ", ".join(
            f"{p} (lag {known[p]})" if p in known else str(p) for p in sorted(partitions)
        )
        lines.append(f"  {kind:<8} {topic}: {shown}")
    return lines or [f"  {kind:<8} -"]


def format_group(view: GroupView) -> str:
    """The group for people: a header, then each member with what it holds, per topic."""
    generation = "-" if view.generation is None else str(view.generation)
    lines = [
        f"group {view.group_id}: {view.state}, protocol {view.protocol}, "
        f"plan generation {generation}, {len(view.members)} member(s)",
        LAG_NOTE,
    ]
    for m in view.members:
        meta = m.metadata
        lines.append("")
        if meta is None:
            lines.append(f"{m.client_id}  member {m.member_id}  unreadable: {m.unreadable}")
            continue
        lines.append(
            f"{m.client_id}  host {meta.host or '-'}  rack {meta.rack or '-'}  "
            f"capacity {meta.capacity}  member {m.member_id}"
        )
        if m.unreadable is not None:
            lines.append(f"  unreadable: {m.unreadable}")
        share = m.assignment or MemberAssignment(generation=-1)
        lag = view.lag(m)
        work = {t: ps for t, ps in share.active.items() if not is_leader_topic(t)}
        lines += _share_lines("active", work, {})
        lines += _share_lines("standby", share.standby, lag)
        lines += _share_lines("warmup", share.warmup, lag)
    return "\n".join(lines)


# -- what if --


@dataclass(frozen=True)
class Change:
    """A change to the group to plan for: a client leaving, or new members joining."""

    kind: str  # "leave" | "add"
    client_id: str | None = None
    count: int = 0

    def __str__(self) -> str:
        return f"leave {self.client_id}" if self.kind == "leave" else f"add {self.count}"


_LEAVE = re.compile(r"^\s*leave\s+(\S+)\s*$")
_ADD = re.compile(r"^\s*add\s+(\d+)\s*$")


def parse_change(text: str) -> Change:
    """``"leave CLIENT_ID"`` or ``"add N"`` (N at least 1)."""
    if found := _LEAVE.match(text):
        return Change("leave", client_id=found.group(1))
    if found := _ADD.match(text):
        count = int(found.group(1))
        if count < 1:
            raise GroupViewError(f"--what-if {text!r}: add at least 1 member")
        return Change("add", count=count)
    raise GroupViewError(f"--what-if {text!r}: expected 'leave CLIENT_ID' or 'add N'")


#: Client ids the what-if gives members it adds.
NEW_MEMBER = "new-{n}"


def changelog_topics(view: GroupView) -> set[str]:
    """The group's changelog topics, as far as the broker's facts tell.

    Faust names a table's changelog ``<app id>-<table>-changelog``; standbys and warmups replay
    changelogs only, and members report offsets for changelogs only, so those count too (a
    table given a changelog topic of another name is found by them).
    """
    prefix = f"{view.group_id}-"
    found = {
        t
        for m in view.members
        for t in m.subscription
        if t.startswith(prefix) and t.endswith("-changelog")
    }
    for m in view.members:
        if m.assignment is not None:
            found.update(m.assignment.standby, m.assignment.warmup)
        if m.metadata is not None:
            found.update(m.metadata.offsets)
    return found


def global_changelogs(view: GroupView) -> set[str]:
    """Changelogs held active by more than one member: global tables' (every member has them).

    The leader leaves them out of the plan, so the what-if does too. With one member, one
    cannot be told from a table's changelog; planned with the rest, it changes nothing then.
    """
    holders: dict[tuple[str, int], int] = {}
    for m in view.members:
        if m.assignment is not None:
            for topic, partitions in m.assignment.active.items():
                for p in partitions:
                    holders[topic, p] = holders.get((topic, p), 0) + 1
    return {topic for (topic, _p), n in holders.items() if n > 1}


def current_facts(view: GroupView) -> dict[str, MemberFacts]:
    """Each readable member as the leader would see it if it joined now (see module docs)."""
    skip = global_changelogs(view)
    facts: dict[str, MemberFacts] = {}
    for m in view.members:
        meta, share = m.metadata, m.assignment
        if meta is None or share is None:
            continue  # the leader gives an unreadable member nothing; it plans without it
        offsets = {t: dict(ps) for t, ps in meta.offsets.items()}
        for topic, partitions in share.active.items():
            ends = view.end_offsets.get(topic)
            if ends is None:
                continue
            for p in partitions:
                if p in ends:
                    offsets.setdefault(topic, {})[p] = ends[p]
        facts[m.member_id] = MemberFacts(
            subscription=[t for t in m.subscription if t not in skip],
            metadata=replace(
                meta,
                generation=share.generation,
                owned_active={t: ps for t, ps in share.active.items() if t not in skip},
                owned_standby=dict(share.standby),
                warmup=dict(share.warmup),
                offsets=offsets,
            ),
        )
    return facts


def apply_change(view: GroupView, facts: dict[str, MemberFacts], change: Change) -> None:
    """Apply ``change`` to ``facts`` in place; `GroupViewError` naming what cannot be done."""
    if change.kind == "leave":
        leaving = [m.member_id for m in view.members if m.client_id == change.client_id]
        if not leaving:
            known = ", ".join(m.client_id for m in view.members)
            raise GroupViewError(
                f"--what-if 'leave {change.client_id}': no member of group {view.group_id!r} "
                f"has that client id (members: {known})"
            )
        for member_id in leaving:
            facts.pop(member_id, None)
        return
    # New workers of the same app subscribe to what the others do.
    subscription = sorted({t for f in facts.values() for t in f.subscription})
    for n in range(1, change.count + 1):
        client_id = NEW_MEMBER.format(n=n)
        facts[client_id] = MemberFacts(
            subscription, MemberMetadata(client_id=client_id, url=f"what-if://{client_id}")
        )


@dataclass(frozen=True)
class Move:
    """One partition changing hands in the what-if, and the records that costs."""

    kind: str  # "active" | "standby" | "warmup"
    topic: str
    partition: int
    from_client: str | None  # None: a replica nobody held before
    to_client: str | None  # None: dropped (a replica), or unassigned (an active)
    replay: int | None  # changelog records the new holder replays; None: not a changelog


@dataclass(frozen=True)
class WhatIf:
    change: Change
    settings: GroupSettings
    moves: tuple[Move, ...]
    followup_rebalance: bool
    unassigned: dict[str, list[int]]

    @property
    def replayed_before_resume(self) -> int:
        """Records new actives replay before they process again (the recovery meter's count)."""
        return sum(m.replay or 0 for m in self.moves if m.kind == "active" and m.to_client)

    @property
    def replayed_by_replicas(self) -> int:
        """Records new standbys and warmups replay while the actives process."""
        return sum(m.replay or 0 for m in self.moves if m.kind != "active" and m.to_client)


def what_if(
    view: GroupView,
    change: Change,
    *,
    topics: Mapping[str, int],
    settings: GroupSettings,
) -> WhatIf:
    """Plan the group with ``change`` applied; ``topics``: partition counts from the broker."""
    facts = current_facts(view)
    apply_change(view, facts, change)
    subscribed = {t for f in facts.values() for t in f.subscription}
    scenario = build_scenario(
        topics={t: n for t, n in topics.items() if t in subscribed},
        changelog_topics=changelog_topics(view),
        members=facts,
        settings=settings,
        broker_ends=view.end_offsets,
    )
    result = assignor.plan(scenario)
    client_of = {
        member_id: f.metadata.client_id if f.metadata is not None else member_id
        for member_id, f in facts.items()
    }
    offsets_of = {
        client_of[member_id]: f.metadata.offsets if f.metadata is not None else {}
        for member_id, f in facts.items()
    }
    changelogs = set(scenario["changelog_topics"])
    skip = global_changelogs(view)

    def placed(
        kind: str, shares: Mapping[str, Mapping[str, Mapping[str, Sequence[int]]]]
    ) -> dict[tuple[str, int], set[str]]:
        out: dict[tuple[str, int], set[str]] = {}
        for client, share in shares.items():
            for topic, partitions in share.get(kind, {}).items():
                if topic in skip:
                    continue
                for p in partitions:
                    out.setdefault((topic, p), set()).add(client)
        return out

    now_shares = {
        m.client_id: {
            "active": m.assignment.active,
            "standby": m.assignment.standby,
            "warmup": m.assignment.warmup,
        }
        for m in view.members
        if m.assignment is not None
    }
    next_shares = {client_of[mid]: share for mid, share in result["members"].items()}

    def replay(client: str, topic: str, p: int) -> int | None:
        if topic not in changelogs:
            return None
        end = view.end_offsets.get(topic, {}).get(p)
        if end is None:
            return None
        return max(0, end - offsets_of.get(client, {}).get(topic, {}).get(p, 0))

    moves: list[Move] = []
    for kind in ("active", "standby", "warmup"):
        before, after = placed(kind, now_shares), placed(kind, next_shares)
        for topic, p in sorted(set(before) | set(after), key=lambda tp: (tp[0], tp[1])):
            old, new = before.get((topic, p), set()), after.get((topic, p), set())
            gone = sorted(old - new, key=natural_key)
            came = sorted(new - old, key=natural_key)
            for i in range(max(len(gone), len(came))):
                source = gone[i] if i < len(gone) else None
                target = came[i] if i < len(came) else None
                moves.append(
                    Move(
                        kind,
                        topic,
                        p,
                        source,
                        target,
                        replay(target, topic, p) if target is not None else None,
                    )
                )
    return WhatIf(
        change=change,
        settings=settings,
        moves=tuple(moves),
        followup_rebalance=bool(result["followup_rebalance"]),
        unassigned=dict(result["unassigned"]),
    )


def what_if_json(found: WhatIf) -> dict[str, Any]:
    return {
        "change": str(found.change),
        "settings": {
            "num_standby_replicas": found.settings.num_standbys,
            "acceptable_recovery_lag": found.settings.acceptable_recovery_lag,
            "max_warmup_replicas": found.settings.max_warmup_replicas,
        },
        "moves": [
            {
                "kind": m.kind,
                "topic": m.topic,
                "partition": m.partition,
                "from": m.from_client,
                "to": m.to_client,
                "replay": m.replay,
            }
            for m in found.moves
        ],
        "records_replayed_before_resume": found.replayed_before_resume,
        "records_replayed_by_replicas": found.replayed_by_replicas,
        "followup_rebalance": found.followup_rebalance,
        "unassigned": found.unassigned,
    }


def format_what_if(found: WhatIf) -> str:
    s = found.settings
    lines = [
        f"what if: {found.change} (planned with num_standby_replicas {s.num_standbys}, "
        f"acceptable_recovery_lag {s.acceptable_recovery_lag}, "
        f"max_warmup_replicas {s.max_warmup_replicas})",
        "each move: kind, topic[partition], from -> to, changelog records the new holder "
        "replays ('new' for a replica nobody held, 'none' for one dropped)",
    ]
    if not found.moves:
        lines.append("  nothing moves")
    for m in found.moves:
        replay = "" if m.replay is None else f"  replays {m.replay}"
        lines.append(
            f"  {m.kind:<8} {m.topic}[{m.partition}]  {m.from_client or 'new'} -> "
            f"{m.to_client or 'none'}{replay}"
        )
    lines.append(
        f"records replayed before processing resumes: {found.replayed_before_resume}; "
        f"by new standbys and warmups meanwhile: {found.replayed_by_replicas}"
    )
    lines.append(f"follow-up rebalance: {'yes' if found.followup_rebalance else 'no'}")
    if found.unassigned:
        lines.append(f"unassigned: {found.unassigned}")
    return "\n".join(lines)
