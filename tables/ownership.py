"""What this worker held in its last assignment, kept in its data directory across restarts.

A restarted worker joins under a new member id; without this it could only report its local
offsets, which say *that* it has state for a task, not that it was running it. With it, the
worker reports its old claims with their old generation: the plan treats them as stale where
someone newer holds the task, and as the best hint of where each task belongs otherwise.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tables.atomic_file import write_atomically

logger = logging.getLogger(__name__)

OWNERSHIP_FILE = "streamapp-ownership.json"


@dataclass(frozen=True)
class Ownership:
    generation: int
    active: Mapping[str, Sequence[int]] = field(default_factory=dict)
    standby: Mapping[str, Sequence[int]] = field(default_factory=dict)
    #: Partitions the last plan gave this worker but withheld for a round (cooperative), which
    #: it claims in its next join: a restart in between must not lose that claim.
    incoming: Mapping[str, Sequence[int]] = field(default_factory=dict)
    #: The warmups of the last assignment, which it reports in its next join: a worker that
    #: restarts before its follow-up rebalance still says which task it warmed up for.
    warmup: Mapping[str, Sequence[int]] = field(default_factory=dict)


def save_ownership(data_dir: str | Path, ownership: Ownership) -> None:
    path = Path(data_dir) / OWNERSHIP_FILE
    payload = {
        "generation": ownership.generation,
        "active": {t: sorted(ps) for t, ps in ownership.active.items()},
        "standby": {t: sorted(ps) for t, ps in ownership.standby.items()},
    }
    if any(ownership.incoming.values()):
        payload["incoming"] = {t: sorted(ps) for t, ps in ownership.incoming.items() if ps}
    if any(ownership.warmup.values()):
        payload["warmup"] = {t: sorted(ps) for t, ps in ownership.warmup.items() if ps}
    # A crash mid-write must leave the previous record, not half of one.
    write_atomically(path, json.dumps(payload, sort_keys=True))


def load_ownership(data_dir: str | Path) -> Ownership | None:
    """The last ownership saved in ``data_dir``; None if there is none or it is unreadable."""
    path = Path(data_dir) / OWNERSHIP_FILE
    try:
        payload = json.loads(path.read_text())
        return Ownership(
            generation=int(payload["generation"]),
            active=_claims(payload["active"]),
            standby=_claims(payload["standby"]),
            # Files written before these fields have none.
            incoming=_claims(payload.get("incoming", {})),
            warmup=_claims(payload.get("warmup", {})),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        # Losing the hint only costs stickiness; the local state itself is untouched.
        logger.warning("%s is unreadable, ignored: %s", path, exc)
        return None


def _claims(value: object) -> dict[str, list[int]]:
    if not isinstance(value, dict):
        raise TypeError("claims are not an object")
    out: dict[str, list[int]] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and p >= 0 for p in partitions
        ):
            raise TypeError(f"claims of {topic!r} are not partition numbers")
        out[str(topic)] = sorted(partitions)
    return out
