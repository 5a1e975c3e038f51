"""Bytes on the wire of the consumer group protocol: streamapp's member metadata and assignment.

Every member's JoinGroup carries a `MemberMetadata` (who it is, what it held, which changelog
offsets it has on disk); the leader answers each member with a `MemberAssignment` (its share of
the plan, plus where every active partition lives, for Faust's router). Pure: no I/O, no clock.

Layout: ``MAGIC`` (2 bytes) + version (1 byte) + zlib-compressed compact JSON. The magic and
version come first so that a reader can say *why* it cannot read a payload (stock Faust's
metadata is plain JSON; a newer streamapp has a higher version) instead of failing obscurely.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from assignor.model import PROTOCOLS, TopicPartitions

MAGIC = b"SA"
METADATA_VERSION = 1
ASSIGNMENT_VERSION = 1
#: JoinGroup metadata of every member travels to the leader in one response and the group
#: coordinator keeps it in memory; past this size the offsets of state we do not own are dropped.
MAX_METADATA_BYTES = 64 * 1024
#: A compressed payload never legitimately inflates past this; guards against zip bombs.
MAX_INFLATED_BYTES = 16 * 1024 * 1024

TopicOffsets = Mapping[str, Mapping[int, int]]


class MetadataError(ValueError):
    """A payload that is not readable streamapp metadata; the message says why."""


class UnknownVersionError(MetadataError):
    """A streamapp payload written by a version this member does not know."""


class StockFaustMetadataError(MetadataError):
    """The payload is stock Faust's ``ClientMetadata``: that member runs Faust's own assignor."""


@dataclass(frozen=True)
class MemberMetadata:
    """What one member tells the leader when it joins."""

    client_id: str
    url: str
    host: str | None = None
    rack: str | None = None
    capacity: int = 1
    generation: int = -1
    owned_active: TopicPartitions = field(default_factory=dict)
    owned_standby: TopicPartitions = field(default_factory=dict)
    #: topic -> partition -> next offset to apply (records applied up to, exclusive), for every
    #: local store on disk, whether or not this member owns the partition now.
    offsets: TopicOffsets = field(default_factory=dict)
    #: topic -> partition -> end offset this member last saw for the changelog partitions it
    #: replays (standbys, warmups). The leader has no end offsets of its own; after a crash
    #: the active that wrote a changelog is gone, and only its replicas know how far it got.
    changelog_ends: TopicOffsets = field(default_factory=dict)
    #: The rebalance protocol this member speaks: "eager" or "cooperative" (KIP-429). Members
    #: of streamapp versions without this field speak eager.
    protocol: str = "eager"
    #: Whether this member kept the partitions it owns through this join (cooperative): the
    #: leader must not give them to another member before this one has given them up.
    kept_owned: bool = False
    #: topic -> partitions its last assignment said were planned for it but withheld that round
    #: (`MemberAssignment.incoming`). A claim for the next plan, at ``generation``, and not a
    #: partition it holds: kept apart from ``owned_active``, which says what it processes.
    incoming: TopicPartitions = field(default_factory=dict)
    #: changelog topic -> partitions its last assignment gave it as warmups
    #: (`MemberAssignment.warmup`). Its offsets alone cannot say which of its caught-up tasks
    #: it warmed up for and which it still has on disk from an earlier generation; the
    #: follow-up must move the first. Members of versions without this field report none.
    warmup: TopicPartitions = field(default_factory=dict)


@dataclass(frozen=True)
class MemberAssignment:
    """What the leader tells one member: its share and where every active partition lives."""

    generation: int
    active: TopicPartitions = field(default_factory=dict)
    standby: TopicPartitions = field(default_factory=dict)
    warmup: TopicPartitions = field(default_factory=dict)
    followup_rebalance: bool = False
    #: warmup replicas in the whole plan: members without warmups of their own wait for the
    #: ones that have them instead of asking for the follow-up rebalance straight away.
    warmups_in_group: int = 0
    #: member url -> topic -> active partitions, the whole group's (Faust's router needs it).
    actives_by_url: Mapping[str, TopicPartitions] = field(default_factory=dict)
    #: topic -> co-partition group number, as Faust's assignor reports it.
    topic_groups: Mapping[str, int] = field(default_factory=dict)
    #: "cooperative" when every member of this plan speaks cooperative: members then keep what
    #: they own through the next join. Leaders without this field planned eager.
    group_protocol: str = "eager"
    #: Cooperative: topic -> partitions the plan gave this member but withheld this round while
    #: their old member revokes them. The member claims them in its next join (see
    #: `MemberMetadata.incoming`), so the follow-up round hands them to it. Leaders without
    #: this field sent none.
    incoming: TopicPartitions = field(default_factory=dict)


def encode_metadata(metadata: MemberMetadata, *, limit: int = MAX_METADATA_BYTES) -> bytes:
    """Encode; past ``limit`` bytes, offsets of partitions the member does not own are dropped.

    Owned partitions' offsets are what keeps stickiness cheap, so they are the last to go; if
    even those do not fit the member is too big for one JoinGroup and that is an error.
    """
    payload = _metadata_payload(metadata, metadata.offsets)
    data = _pack(METADATA_VERSION, payload)
    if len(data) <= limit:
        return data
    owned = _owned_offsets(metadata)
    data = _pack(METADATA_VERSION, _metadata_payload(metadata, owned))
    if len(data) <= limit:
        return data
    raise MetadataError(
        f"metadata of client {metadata.client_id!r} is {len(data)} bytes even without the "
        f"offsets of unowned state, above the limit of {limit}"
    )


def decode_metadata(data: bytes) -> MemberMetadata:
    """Decode a member's metadata, or raise `MetadataError` saying what is wrong with it."""
    payload = _unpack(data, METADATA_VERSION, "member metadata")
    try:
        return MemberMetadata(
            client_id=_str(payload, "c"),
            url=_str(payload, "u"),
            host=_opt_str(payload, "h"),
            rack=_opt_str(payload, "r"),
            capacity=_int(payload, "k", minimum=1),
            generation=_int(payload, "g", minimum=-1),
            owned_active=_partitions(payload.get("a", {}), "a"),
            owned_standby=_partitions(payload.get("s", {}), "s"),
            offsets=_offsets(payload.get("o", {}), "o"),
            changelog_ends=_offsets(payload.get("e", {}), "e"),
            protocol=_protocol(payload),
            kept_owned=_bool(payload, "K"),
            incoming=_partitions(payload.get("I", {}), "I"),
            warmup=_partitions(payload.get("w", {}), "w"),
        )
    except (KeyError, TypeError) as exc:
        raise MetadataError(f"member metadata is malformed: {exc}") from None


def encode_assignment(assignment: MemberAssignment) -> bytes:
    payload: dict[str, Any] = {
        "g": assignment.generation,
        "a": _sorted_partitions(assignment.active),
        "s": _sorted_partitions(assignment.standby),
        "w": _sorted_partitions(assignment.warmup),
        "f": assignment.followup_rebalance,
        "W": assignment.warmups_in_group,
        "d": {url: _sorted_partitions(tps) for url, tps in assignment.actives_by_url.items()},
        "t": dict(assignment.topic_groups),
    }
    if assignment.group_protocol != "eager":
        payload["P"] = assignment.group_protocol
    if any(assignment.incoming.values()):
        payload["i"] = _sorted_partitions(assignment.incoming)
    return _pack(ASSIGNMENT_VERSION, payload)


def decode_assignment(data: bytes) -> MemberAssignment:
    payload = _unpack(data, ASSIGNMENT_VERSION, "assignment")
    try:
        by_url = payload.get("d", {})
        if not isinstance(by_url, dict):
            raise TypeError("'d' is not an object")
        groups = payload.get("t", {})
        if not isinstance(groups, dict) or not all(isinstance(v, int) for v in groups.values()):
            raise TypeError("'t' is not an object of integers")
        followup = payload.get("f", False)
        if not isinstance(followup, bool):
            raise TypeError("'f' is not a boolean")
        return MemberAssignment(
            generation=_int(payload, "g", minimum=-1),
            active=_partitions(payload.get("a", {}), "a"),
            standby=_partitions(payload.get("s", {}), "s"),
            warmup=_partitions(payload.get("w", {}), "w"),
            followup_rebalance=followup,
            warmups_in_group=_int(payload, "W", minimum=0) if "W" in payload else 0,
            actives_by_url={str(url): _partitions(tps, "d") for url, tps in by_url.items()},
            topic_groups={str(k): v for k, v in groups.items()},
            group_protocol=_protocol(payload),
            incoming=_partitions(payload.get("i", {}), "i"),
        )
    except (KeyError, TypeError) as exc:
        raise MetadataError(f"assignment is malformed: {exc}") from None


def _metadata_payload(metadata: MemberMetadata, offsets: TopicOffsets) -> dict[str, Any]:
    # One-letter keys: the metadata of every member crosses the wire at each rebalance.
    payload: dict[str, Any] = {
        "c": metadata.client_id,
        "u": metadata.url,
        "k": metadata.capacity,
        "g": metadata.generation,
    }
    if metadata.host is not None:
        payload["h"] = metadata.host
    if metadata.rack is not None:
        payload["r"] = metadata.rack
    if metadata.owned_active:
        payload["a"] = _sorted_partitions(metadata.owned_active)
    if metadata.owned_standby:
        payload["s"] = _sorted_partitions(metadata.owned_standby)
    if offsets:
        payload["o"] = _sorted_offsets(offsets)
    if metadata.changelog_ends:
        payload["e"] = _sorted_offsets(metadata.changelog_ends)
    # Left out when eager: the bytes an eager member sends stay those of earlier versions.
    if metadata.protocol != "eager":
        payload["P"] = metadata.protocol
    if metadata.kept_owned:
        payload["K"] = True
    if any(metadata.incoming.values()):
        payload["I"] = _sorted_partitions(metadata.incoming)
    if any(metadata.warmup.values()):
        payload["w"] = _sorted_partitions(metadata.warmup)
    return payload


def _sorted_offsets(offsets: TopicOffsets) -> dict[str, dict[str, int]]:
    return {
        topic: {str(p): off for p, off in sorted(parts.items())}
        for topic, parts in sorted(offsets.items())
        if parts
    }


def _owned_offsets(metadata: MemberMetadata) -> dict[str, dict[int, int]]:
    owned: dict[str, set[int]] = {}
    # A warmup's offsets are what its claim is about: without them it counts for nothing.
    for claims in (
        metadata.owned_active,
        metadata.owned_standby,
        metadata.incoming,
        metadata.warmup,
    ):
        for topic, partitions in claims.items():
            owned.setdefault(topic, set()).update(partitions)
    return {
        topic: {p: off for p, off in parts.items() if p in owned.get(topic, ())}
        for topic, parts in metadata.offsets.items()
    }


def _sorted_partitions(tps: TopicPartitions) -> dict[str, list[int]]:
    return {topic: sorted(set(parts)) for topic, parts in sorted(tps.items()) if parts}


def _pack(version: int, payload: Mapping[str, Any]) -> bytes:
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return MAGIC + bytes([version]) + zlib.compress(raw, 6)


def _unpack(data: bytes, version: int, what: str) -> dict[str, Any]:
    if not data:
        raise MetadataError(f"{what} is empty")
    if not data.startswith(MAGIC):
        if _looks_like_stock_faust(data):
            raise StockFaustMetadataError(
                f"{what} is stock Faust's: that worker runs Faust's PartitionAssignor"
            )
        raise MetadataError(f"{what} is not streamapp's (no {MAGIC!r} header)")
    if len(data) < len(MAGIC) + 1:
        raise MetadataError(f"{what} is truncated (no version byte)")
    found = data[len(MAGIC)]
    if found != version:
        raise UnknownVersionError(f"{what} has version {found}; this worker reads {version}")
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(data[len(MAGIC) + 1 :], MAX_INFLATED_BYTES)
        if inflater.unconsumed_tail:
            raise MetadataError(f"{what} inflates past {MAX_INFLATED_BYTES} bytes")
        if not inflater.eof:
            raise MetadataError(f"{what} is truncated")
        payload = json.loads(raw)
    except (zlib.error, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MetadataError(f"{what} is corrupt: {exc}") from None
    if not isinstance(payload, dict):
        raise MetadataError(f"{what} is not a JSON object")
    return payload


def _looks_like_stock_faust(data: bytes) -> bool:
    # Stock Faust sends ClientMetadata.dumps(): a JSON object with its assignment and url.
    try:
        payload = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(payload, dict) and "assignment" in payload and "url" in payload


def _str(payload: Mapping[str, Any], key: str) -> str:
    value = payload[key]
    if not isinstance(value, str) or not value:
        raise TypeError(f"{key!r} is not a non-empty string")
    return value


def _opt_str(payload: Mapping[str, Any], key: str) -> str | None:
    value = payload.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{key!r} is not a string")
    return value


def _protocol(payload: Mapping[str, Any]) -> str:
    # A protocol this version does not know (a later streamapp's) is not one it can run with
    # that member: it counts as eager, which every version speaks.
    value = payload.get("P", "eager")
    if not isinstance(value, str):
        raise TypeError("'P' is not a string")
    return value if value in PROTOCOLS else "eager"


def _bool(payload: Mapping[str, Any], key: str) -> bool:
    value = payload.get(key, False)
    if not isinstance(value, bool):
        raise TypeError(f"{key!r} is not a boolean")
    return value


def _int(payload: Mapping[str, Any], key: str, *, minimum: int) -> int:
    value = payload[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TypeError(f"{key!r} is not an integer >= {minimum}")
    return value


def _partitions(value: Any, key: str) -> dict[str, list[int]]:
    if not isinstance(value, dict):
        raise TypeError(f"{key!r} is not an object")
    out: dict[str, list[int]] = {}
    for topic, parts in value.items():
        if not isinstance(parts, list) or not all(_is_count(p) for p in parts):
            raise TypeError(f"{key!r}[{topic!r}] is not a list of partitions")
        out[str(topic)] = sorted(parts)
    return out


def _offsets(value: Any, key: str) -> dict[str, dict[int, int]]:
    if not isinstance(value, dict):
        raise TypeError(f"{key!r} is not an object")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict):
            raise TypeError(f"{key!r}[{topic!r}] is not an object")
        offsets: dict[int, int] = {}
        for partition, offset in parts.items():
            if not str(partition).isdigit() or not _is_count(offset):
                raise TypeError(f"{key!r}[{topic!r}] has a bad entry {partition!r}: {offset!r}")
            offsets[int(partition)] = offset
        out[str(topic)] = offsets
    return out


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
