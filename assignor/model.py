"""The scenario model: typed, validated facts that every strategy decides on.

`assignor.scenario_parser.parse_scenario` turns the JSON object of docs/assignment-rules.md
into these frozen dataclasses:

- `Scenario`: ``topics`` (name -> partition count), ``changelog_topics``,
  ``copartitioned`` (declared groups, as given), ``num_standbys``,
  ``acceptable_recovery_lag``, ``max_warmup_replicas``, ``protocol``
  (``"eager"`` | ``"cooperative"``), ``members`` (member id -> `Member`, in
  member-id order), ``end_offsets`` (changelog topic -> partition -> offset,
  already completed with the highest offset any member reports where the
  scenario gave none), ``stale_claims`` and ``conflicting_claims`` (counts of
  facts that were dropped, see `assignor.scenario_parser`).
- `Member`: ``member_id``, ``client_id``, ``host``, ``rack``, ``capacity``,
  ``subscription`` (sorted tuple), ``generation``, ``owned_active`` and
  ``owned_standby`` (topic -> sorted tuple of partitions), ``offsets``
  (topic -> partition -> offset), ``owned_warmup`` (changelog topic -> partitions
  it replayed as warmups in that generation; only the choice of which task a holder
  gives up reads it), ``kept_active`` (cooperative: what it kept processing through
  the join, unchecked; only the withholding reads it).

Mappings in these dataclasses are plain dicts for speed; treat them as
read-only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "PROTOCOLS",
    "Claims",
    "Member",
    "Offsets",
    "Scenario",
    "TopicPartitions",
]

PROTOCOLS = ("eager", "cooperative")

#: topic -> partitions, read-only: what any caller may pass or read
TopicPartitions = Mapping[str, Sequence[int]]
#: topic -> sorted partitions, as a member claims them (owned or superseded)
Claims = dict[str, tuple[int, ...]]
#: topic -> partition -> changelog offset
Offsets = dict[str, dict[int, int]]


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
