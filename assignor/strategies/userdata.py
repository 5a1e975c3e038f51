"""The user data the classic strategies carry through the group protocol.

A member's JoinGroup metadata says what it owned after the last rebalance and
the generation (KIP-315's epoch) of the assignment that gave it, plus whether
it can start a follow-up rebalance on its own (see `aiokafka_assignors`). The
leader's assignment tells each member the new generation and whether a
follow-up rebalance is wanted. Both are small JSON objects: readable in a
broker dump and easy to evolve (unknown keys are ignored).

Decoding never trusts the bytes: anything malformed raises `UserDataError`
naming the cause, and the caller treats that member as fresh.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

VERSION = 1


class UserDataError(ValueError):
    """Member user data that cannot be understood; the message names why."""


@dataclass(frozen=True)
class SubscriptionData:
    """What a member tells the leader when it joins."""

    generation: int = -1
    owned: dict[str, list[int]] = field(default_factory=dict)
    can_rejoin: bool = False


@dataclass(frozen=True)
class AssignmentData:
    """What the leader tells each member along with its partitions."""

    generation: int = -1
    followup: bool = False


def encode_subscription(data: SubscriptionData) -> bytes:
    owned = {t: sorted(ps) for t, ps in sorted(data.owned.items()) if ps}
    body = {"v": VERSION, "generation": data.generation, "owned": owned}
    if data.can_rejoin:
        body["rejoin"] = True
    return json.dumps(body, separators=(",", ":")).encode()


def encode_assignment(data: AssignmentData) -> bytes:
    body = {"v": VERSION, "generation": data.generation, "followup": data.followup}
    return json.dumps(body, separators=(",", ":")).encode()


def _object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UserDataError(f"user data is not UTF-8 text ({exc.reason})") from None
    except ValueError as exc:
        raise UserDataError(f"user data is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise UserDataError(f"user data must be a JSON object, got {type(body).__name__}")
    version = body.get("v")
    if version != VERSION:
        raise UserDataError(f"user data version must be {VERSION}, got {version!r}")
    return body


def _generation(body: dict[str, Any]) -> int:
    value = body.get("generation", -1)
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise UserDataError(f"generation must be an integer >= -1, got {value!r}")
    return value


def decode_subscription(raw: bytes) -> SubscriptionData:
    """Parse a member's JoinGroup user data; empty bytes mean a fresh member."""
    if not raw:
        return SubscriptionData()
    body = _object(raw)
    owned_raw = body.get("owned", {})
    if not isinstance(owned_raw, dict):
        raise UserDataError(f"owned must be an object, got {type(owned_raw).__name__}")
    owned: dict[str, list[int]] = {}
    for topic, parts in owned_raw.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise UserDataError(f"owned.{topic} must be a list of partition numbers >= 0")
        owned[topic] = parts
    return SubscriptionData(
        generation=_generation(body), owned=owned, can_rejoin=body.get("rejoin") is True
    )


def decode_assignment(raw: bytes) -> AssignmentData:
    """Parse the leader's assignment user data; empty bytes mean no news."""
    if not raw:
        return AssignmentData()
    body = _object(raw)
    return AssignmentData(generation=_generation(body), followup=body.get("followup") is True)
