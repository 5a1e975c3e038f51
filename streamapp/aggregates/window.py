"""Windows over event time: tumbling, hopping, sliding and session windows; which windows a
record falls in, when one closes.

Pure: no Faust, no I/O, no wall clock. Times are event times in milliseconds.

A window is ``[start, start + size_ms)``, starts at multiples of ``step_ms`` (so windows of
every partition and every worker line up). Tumbling windows have ``step_ms == size_ms``: each
record is in exactly one. Hopping windows have ``step_ms < size_ms``: each record is in
``ceil(size / step)`` of them (fewer only if ``size`` is not a multiple of ``step``).

Each partition has a *clock*: the highest event time seen in it. A window is *closed* once the
clock reaches ``start + size_ms + grace_ms``: its result is final, it is emitted and forgotten.
A record whose windows are all closed is *late*: it changes nothing, and is counted (and
dead-lettered, if the aggregate has a dead-letter topic). A record of a hopping window that is
late for its oldest windows only is folded into the ones still open.

Sliding windows (`SlidingWindows`): one window per distinct event time ``t`` of a key's records,
``[t - size_ms, t]`` (both ends included), holding every record of the key in that range. It
closes once the clock reaches ``t + 1 + grace_ms``.

Session windows (`SessionWindows`): a key's records at most ``gap_ms`` apart in event time
make one session ``[first, last]``; a record within ``gap_ms`` of two sessions merges them. A
session closes once the clock reaches ``last + 1 + gap_ms + grace_ms``: no record that is not
late can reach it any more.

For both, a record more than ``grace_ms`` behind the clock is *late*: the window or session it
belongs to may be closed already (for a sliding window, the one it ends is).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SessionWindows", "SlidingWindows", "Windows"]


@dataclass(frozen=True)
class Windows:
    """Tumbling and hopping windows: ``size_ms`` long, starting every ``step_ms``, open
    ``grace_ms`` past their end. Build them with `tumbling`, `hopping`, `sliding` or `session`.

    Raises ValueError for a size or step not above 0, a step above the size (records between
    windows would be in none), or a negative grace.
    """

    size_ms: int
    step_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        if self.size_ms <= 0 or self.step_ms <= 0 or self.grace_ms < 0:
            raise ValueError(f"size and step must be > 0 and grace >= 0, got {self}")
        if self.step_ms > self.size_ms:
            # Gaps between windows: records in them would belong to no window at all.
            raise ValueError(f"step must not exceed size (no gaps between windows), got {self}")

    @classmethod
    def tumbling(cls, size_ms: int, *, grace_ms: int = 0) -> Windows:
        """Windows of ``size_ms`` one after the other: each record in exactly one.

        Raises ValueError for a size not above 0 or a negative grace."""
        return cls(size_ms=size_ms, step_ms=size_ms, grace_ms=grace_ms)

    @classmethod
    def hopping(cls, size_ms: int, step_ms: int, *, grace_ms: int = 0) -> Windows:
        """Windows of ``size_ms`` starting every ``step_ms``: each record in about
        ``size_ms / step_ms`` of them.

        Raises ValueError for a size or step not above 0, a step above the size, or a
        negative grace."""
        return cls(size_ms=size_ms, step_ms=step_ms, grace_ms=grace_ms)

    @staticmethod
    def sliding(size_ms: int, *, grace_ms: int = 0) -> SlidingWindows:
        """One window ``[t - size_ms, t]`` per distinct event time ``t`` of a key's records
        (see `SlidingWindows`). Raises ValueError for a negative size or grace."""
        return SlidingWindows(size_ms=size_ms, grace_ms=grace_ms)

    @staticmethod
    def session(gap_ms: int, *, grace_ms: int = 0) -> SessionWindows:
        """Sessions of records at most ``gap_ms`` apart (see `SessionWindows`). Raises
        ValueError for a gap not above 0 or a negative grace."""
        return SessionWindows(gap_ms=gap_ms, grace_ms=grace_ms)

    def starts(self, time_ms: int) -> list[int]:
        """The starts of the windows holding ``time_ms``, oldest first."""
        # start <= t < start + size, start a multiple of step. Floor division keeps this right
        # for negative times too.
        last = (time_ms // self.step_ms) * self.step_ms
        first = ((time_ms - self.size_ms) // self.step_ms + 1) * self.step_ms
        return list(range(first, last + 1, self.step_ms))

    def end(self, start_ms: int) -> int:
        """The window's end, exclusive."""
        return start_ms + self.size_ms

    def closes_at(self, start_ms: int) -> int:
        """The clock value at which the window is closed: final, emitted and forgotten."""
        return start_ms + self.size_ms + self.grace_ms

    def is_closed(self, start_ms: int, clock_ms: int) -> bool:
        """Whether the window starting at ``start_ms`` is closed at ``clock_ms``."""
        return clock_ms >= self.closes_at(start_ms)

    def open_starts(self, time_ms: int, clock_ms: int) -> list[int]:
        """The windows of ``time_ms`` still open at ``clock_ms`` (empty: the record is late)."""
        return [s for s in self.starts(time_ms) if not self.is_closed(s, clock_ms)]

    def is_late(self, time_ms: int, clock_ms: int) -> bool:
        """Whether every window of ``time_ms`` is closed at ``clock_ms``."""
        return not self.open_starts(time_ms, clock_ms)


@dataclass(frozen=True)
class SlidingWindows:
    """One window per distinct event time ``t`` of a key's records: ``[t - size_ms, t]``, both
    ends included, holding every record of the key in that range; open ``grace_ms`` past ``t``.

    As a `streamapp.aggregates.WindowResult`, the window starts at ``t - size_ms`` and ends
    (exclusive) at ``t + 1``.
    """

    size_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        if self.size_ms < 0 or self.grace_ms < 0:
            raise ValueError(f"size and grace must be >= 0, got {self}")

    def closes_at(self, time_ms: int) -> int:
        """The clock value at which the window ending at ``time_ms`` is closed."""
        return time_ms + 1 + self.grace_ms

    def is_late(self, time_ms: int, clock_ms: int) -> bool:
        """Whether a record is more than the grace behind the clock (its window is closed)."""
        return time_ms + self.grace_ms < clock_ms

    def contains(self, end_ms: int, time_ms: int) -> bool:
        """Whether the window ending at ``end_ms`` holds a record of time ``time_ms``."""
        return end_ms - self.size_ms <= time_ms <= end_ms

    def held_until(self, time_ms: int) -> int:
        """The clock value from which no window that is still to come can hold a record of
        ``time_ms`` (it is no longer kept)."""
        return time_ms + self.size_ms + 1 + self.grace_ms


@dataclass(frozen=True)
class SessionWindows:
    """Sessions: a key's records at most ``gap_ms`` apart in event time are in one session,
    open ``grace_ms`` past the point where no record can join it any more.

    As a `streamapp.aggregates.WindowResult`, a session starts at its first record's time and
    ends (exclusive) one past its last record's time.
    """

    gap_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        if self.gap_ms <= 0 or self.grace_ms < 0:
            raise ValueError(f"gap must be > 0 and grace >= 0, got {self}")

    def reaches(self, first_ms: int, last_ms: int, time_ms: int) -> bool:
        """Whether a record of ``time_ms`` joins the session ``[first_ms, last_ms]``."""
        return first_ms - self.gap_ms <= time_ms <= last_ms + self.gap_ms

    def closes_at(self, last_ms: int) -> int:
        """The clock value at which a session whose last record is at ``last_ms`` is closed."""
        return last_ms + 1 + self.gap_ms + self.grace_ms

    def is_late(self, time_ms: int, clock_ms: int) -> bool:
        """Whether a record is more than the grace behind the clock (its session may be
        closed)."""
        return time_ms + self.grace_ms < clock_ms
