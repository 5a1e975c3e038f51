"""How far a replica's local state is behind its changelog, and whether that is close enough.

Offsets here are *next* offsets (records applied up to, exclusive), the same unit as Kafka's end
offsets, so lag is a plain difference. A replica is *caught up* for a partition when its lag is
at most ``acceptable_recovery_lag`` (Kafka Streams' ``acceptable.recovery.lag``): promoting it
would replay at most that many records.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def lags(local_next: Mapping[K, int], end_offsets: Mapping[K, int]) -> dict[K, int]:
    """Partition -> records the local state is behind; partitions without a known end are left out.

    A partition with no local state counts from offset 0: all of its changelog is to replay.
    """
    return {tp: max(0, end - local_next.get(tp, 0)) for tp, end in end_offsets.items() if end >= 0}


@dataclass(frozen=True)
class Readiness:
    acceptable_recovery_lag: int

    def caught_up(self, lag: Mapping[K, int], partitions: Collection[K]) -> bool:
        """Every one of ``partitions`` has a known lag within the acceptable one."""
        return all(tp in lag and lag[tp] <= self.acceptable_recovery_lag for tp in partitions)
