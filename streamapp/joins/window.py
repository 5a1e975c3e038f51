"""A stream-stream join's window rule: which pairs match, when a record is late or expired.

Pure: no Faust, no I/O, no wall clock. Times are event times in milliseconds.

A left record ``l`` and a right record ``r`` with the same key match when

    l.time_ms - before_ms <= r.time_ms <= l.time_ms + after_ms

(both bounds inclusive). ``JoinWindow.within(ms)`` is the symmetric window
``|l - r| <= ms``; the ad-click rule (a click within ``size`` after its impression) is
``JoinWindow(before_ms=0, after_ms=size, grace_ms=...)`` with impressions on the left.

Each side of one partition has its own *clock*: the highest event time seen on that side.
Records of one side may arrive out of event-time order by at most ``grace_ms``; a record more
than ``grace_ms`` behind its own side's clock is *late*, is not joined, and is counted (and
dead-lettered, if the join has a dead-letter topic).

A stored record can only still be matched by records of the *other* side, so it is expired by
the other side's clock: a left record once the right clock passes ``time + after + grace``, a
right record once the left clock passes ``time + before + grace``. Past that point any record
that could match it would be late. Driving each side's expiry by the other side's clock keeps
the join exact however the two topics' consumption interleaves (after a restart one topic's
backlog may be read far ahead of the other's): for records that are not late, the join emits
exactly the pairs a batch nested-loop join under the same rule emits.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["JoinKind", "JoinWindow", "Side"]


class Side(enum.StrEnum):
    """The two inputs of a windowed join; each is also the name of its role (``"left"``)."""

    LEFT = "left"
    RIGHT = "right"

    @property
    def other(self) -> Side:
        """The other side."""
        return Side.RIGHT if self is Side.LEFT else Side.LEFT


class JoinKind(enum.Enum):
    """Which records with no match are emitted (once they can no longer match)."""

    INNER = "inner"  # none: only pairs
    LEFT = "left"  # left records with no match, paired with None
    OUTER = "outer"  # both sides' records with no match

    def emits_unmatched(self, side: Side) -> bool:
        """Whether records of ``side`` that expire with no match are emitted (paired with
        None)."""
        if self is JoinKind.OUTER:
            return True
        return self is JoinKind.LEFT and side is Side.LEFT


@dataclass(frozen=True)
class JoinWindow:
    """Match ``r`` to ``l`` when ``l - before_ms <= r <= l + after_ms`` (see the module);
    records of a side may come up to ``grace_ms`` out of order.

    Raises ValueError for a negative bound or grace.
    """

    before_ms: int
    after_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        if self.before_ms < 0 or self.after_ms < 0 or self.grace_ms < 0:
            raise ValueError(f"window bounds and grace must be >= 0, got {self}")

    @classmethod
    def within(cls, ms: int, *, grace_ms: int = 0) -> JoinWindow:
        """The symmetric window: ``|l - r| <= ms``."""
        return cls(before_ms=ms, after_ms=ms, grace_ms=grace_ms)

    def matches(self, left_ms: int, right_ms: int) -> bool:
        """Whether a left record of time ``left_ms`` and a right one of ``right_ms`` match."""
        return left_ms - self.before_ms <= right_ms <= left_ms + self.after_ms

    def is_late(self, time_ms: int, own_clock_ms: int) -> bool:
        """Whether a record is further behind its own side's clock than the grace allows."""
        return time_ms + self.grace_ms < own_clock_ms

    def expires_after(self, side: Side, time_ms: int) -> int:
        """The other side's clock value past which no record can match this one any more."""
        reach = self.after_ms if side is Side.LEFT else self.before_ms
        return time_ms + reach + self.grace_ms

    def is_expired(self, side: Side, time_ms: int, other_clock_ms: int) -> bool:
        """Whether a ``side`` record of ``time_ms`` can match nothing more at the other side's
        clock ``other_clock_ms``."""
        return other_clock_ms > self.expires_after(side, time_ms)
