"""What a join or an aggregate did with one source record, and what a sweep found: pure.

One `Outcome` for every join and aggregate of `streamapp.joins` and `streamapp.aggregates`, one
`Arrival` (a record's outcome and what it emitted) and one `Expiry` (what the clocks expired,
applied once what it emits is delivered), each generic over what its processor emits.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from streamapp.slot_index import PlannedSweep

__all__ = ["Arrival", "Expiry", "Outcome"]

T = TypeVar("T")


class Outcome(enum.Enum):
    """What a join or an aggregate did with one source record (what ``on_record`` is told).

    - ``ACCEPTED``: taken into the state (stored, folded, or a table value updated); what it
      caused is emitted.
    - ``LATE``: behind its clock by more than the rule allows: changes nothing, is counted, and
      goes to the ``dead_letter_topic`` if there is one.
    - ``REPLAY``: processed before a crash and still held: what it emits is emitted again
      (at-least-once).
    - ``SKIPPED``: processed before, and nothing of it is left to do.
    - ``DUPLICATE``: its id is the id of a record still held: neither stored nor joined nor
      folded.
    - ``UNMATCHED``: a stream record of an inner stream-table join with no table value: not
      emitted.
    - ``UNDECODABLE``: its key or value did not decode with its topic's codecs, it has no key, or
      its event time or id could not be read: it changes no state and goes on to the app's
      ``bad_record_policy``.
    """

    ACCEPTED = "accepted"
    LATE = "late"
    REPLAY = "replay"
    SKIPPED = "skipped"
    DUPLICATE = "duplicate"
    UNMATCHED = "unmatched"
    UNDECODABLE = "undecodable"


@dataclass(frozen=True)
class Arrival(Generic[T]):
    """A record's outcome and what it emitted (a join's pairs; the windows a record went in)."""

    outcome: Outcome
    emitted: tuple[T, ...] = ()

    @property
    def pairs(self) -> tuple[T, ...]:
        """A join's name for `emitted`: the pairs the record completed."""
        return self.emitted

    @property
    def starts(self) -> tuple[T, ...]:
        """An aggregate's name for `emitted`: the starts of the windows the record went in."""
        return self.emitted


@dataclass
class Expiry(PlannedSweep, Generic[T]):
    """What a sweep found, to emit; nothing in the stores changes until `apply`, which the
    wiring runs once what it emitted is delivered."""

    emitted: tuple[T, ...] = field(default=())

    @property
    def unmatched(self) -> tuple[T, ...]:
        """A join's name for `emitted`: the records that expired with no match."""
        return self.emitted

    @property
    def closed(self) -> tuple[T, ...]:
        """An aggregate's name for `emitted`: the windows that closed, with their values."""
        return self.emitted
