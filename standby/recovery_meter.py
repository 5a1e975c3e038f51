"""Counts what recovery cost: changelog records replayed and seconds until processing resumed.

Records replayed for an active partition are the changelog offsets it applied between its local
state at the rebalance and the moment it was caught up (the offset distance, as Kafka Streams'
restore listener counts it). Seconds to resume run from the partitions being revoked to every
active partition processing again.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RecoveryMeter:
    records_replayed_total: int = 0
    rebalances: int = 0
    last_records_replayed: int | None = None
    last_seconds_to_resume: float | None = None
    last_replayed_by_partition: dict[Hashable, int] = field(default_factory=dict)
    _revoked_at: float | None = field(default=None, init=False)
    _start: dict[Hashable, int] = field(default_factory=dict, init=False)
    _waiting: bool = field(default=False, init=False)

    def on_revoked(self, now: float) -> None:
        # Several revocations can precede one resume (a rebalance interrupted by another):
        # the clock runs from the first.
        if self._revoked_at is None:
            self._revoked_at = now

    def on_assigned(self, now: float, start_next: Mapping[Any, int]) -> None:
        """A new assignment: ``start_next`` is each active changelog partition's local state.

        An assignment that comes before the previous one resumed (a rebalance in the middle of
        a replay) counts a partition both hold from where its replay began under the first:
        taken from the second, the records the cut-short replay had applied went uncounted (a
        worker joining a group with a global table reported 47 of the 2,000 records it read).
        """
        self.rebalances += 1
        if self._waiting:
            earlier = self._start
            start_next = {
                tp: min(start, earlier.get(tp, start)) for tp, start in start_next.items()
            }
        self._start = dict(start_next)
        self._waiting = True
        if self._revoked_at is None:
            self._revoked_at = now

    def on_resumed(self, now: float, applied_next: Mapping[Any, int]) -> bool:
        """Actives are caught up and processing; ``applied_next``: where each one got to.

        False when there was no new assignment to account for.
        """
        if not self._waiting:
            return False
        replayed = {
            tp: max(0, applied_next.get(tp, start) - start) for tp, start in self._start.items()
        }
        self.last_replayed_by_partition = replayed
        self.last_records_replayed = sum(replayed.values())
        self.records_replayed_total += self.last_records_replayed
        if self._revoked_at is not None:
            self.last_seconds_to_resume = round(now - self._revoked_at, 3)
        self._revoked_at = None
        self._waiting = False
        return True

    def last_rebalance_json(self) -> dict[str, Any]:
        return {
            "records_replayed": self.last_records_replayed,
            "seconds_to_resume": self.last_seconds_to_resume,
            "by_partition": _by_topic(self.last_replayed_by_partition),
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "records_replayed_total": self.records_replayed_total,
            "last_rebalance": self.last_rebalance_json(),
        }


def _by_topic(replayed: Mapping[Any, int]) -> dict[str, dict[str, int]]:
    """``{(topic, partition): n}`` as JSON: topic -> partition -> records."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), records in sorted(replayed.items()):
        out.setdefault(str(topic), {})[str(partition)] = records
    return out
