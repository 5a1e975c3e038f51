"""Tumbling and hopping windows over event time: which windows a record falls in, when one closes.

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
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Windows"]


@dataclass(frozen=True)
class Windows:
    """Windows of ``size_ms`` starting every ``step_ms``, open ``grace_ms`` past their end."""

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
        return cls(size_ms=size_ms, step_ms=size_ms, grace_ms=grace_ms)

    @classmethod
    def hopping(cls, size_ms: int, step_ms: int, *, grace_ms: int = 0) -> Windows:
        return cls(size_ms=size_ms, step_ms=step_ms, grace_ms=grace_ms)

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
        return clock_ms >= self.closes_at(start_ms)

    def open_starts(self, time_ms: int, clock_ms: int) -> list[int]:
        """The windows of ``time_ms`` still open at ``clock_ms`` (empty: the record is late)."""
        return [s for s in self.starts(time_ms) if not self.is_closed(s, clock_ms)]

    def is_late(self, time_ms: int, clock_ms: int) -> bool:
        return not self.open_starts(time_ms, clock_ms)
