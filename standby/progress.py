"""Restore progress as one log line at a steady interval, instead of minutes of silence."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ProgressMeter:
    """Turns (time, records done) samples into a rate and a human line."""

    _last: tuple[float, int] | None = field(default=None, init=False)

    def line(self, now: float, what: str, partitions: int, done: int, remaining: int) -> str:
        rate = 0.0
        if self._last is not None and now > self._last[0]:
            rate = max(0.0, (done - self._last[1]) / (now - self._last[0]))
        self._last = (now, done)
        eta = f", about {remaining / rate:.0f} s left" if rate > 0 and remaining else ""
        return (
            f"restoring {what}: {partitions} partition(s), {done:,} records done, "
            f"{remaining:,} remaining, {rate:,.0f} records/s{eta}"
        )

    def reset(self) -> None:
        self._last = None
