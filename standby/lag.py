"""How far a replica's local state is behind its changelog, and whether that is close enough.

Offsets here are *next* offsets (records applied up to, exclusive), the same unit as Kafka's end
offsets, so lag is a plain difference. A replica is *caught up* for a partition when its lag is
at most ``acceptable_recovery_lag`` (Kafka Streams' ``acceptable.recovery.lag``): promoting it
would replay at most that many records.

The other way round, an offset *above* the end is one no store can have reached: the group
leader holds members' reports against the broker's end offsets (`OffsetReportCheck`).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

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

    def beyond(self, lag: Mapping[K, int]) -> dict[K, int]:
        """How far each partition still is from counting as caught up (0 once it does).

        A caught-up replica's lag moves with every write to its changelog; beyond the
        acceptable lag only replaying moves it down, so only there is a lower lag progress.
        """
        return {tp: max(0, n - self.acceptable_recovery_lag) for tp, n in lag.items()}


@dataclass(frozen=True)
class FalseOffsets(Generic[K]):
    """A member that reported changelog offsets the broker's changelog does not reach."""

    member_id: str
    client_id: str
    #: partition -> (offset the member reported, the broker's end offset)
    offsets: Mapping[K, tuple[int, int]]
    #: The first time this member is found out (its warning is said once).
    first: bool


@dataclass
class _Report(Generic[K]):
    first_at: float
    client_id: str
    offsets: dict[K, int]


class OffsetReportCheck(Generic[K]):
    """Member-reported offsets above the broker's end, held until the end passes them or time is up.

    A member cannot have applied records its changelog does not have; but the group leader
    holds reports against end offsets read a little before the rebalance, and an honest member
    may be ahead of those by what it wrote since (and, under exactly-once, by its open
    transaction: the end a read_committed consumer sees is the last stable offset). So a report
    is called false only when the broker's end, read ``grace_s`` or more after the report, is
    still below it; one that the end has passed by then is forgotten. A false one stays false
    for as long as the member keeps reporting it above the end (a damaged store is rebuilt once
    its partition is assigned, and then reports the truth).
    """

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._pending: dict[str, _Report[K]] = {}
        self._false: dict[str, set[K]] = {}
        self._named: set[str] = set()

    @property
    def false_offsets(self) -> dict[str, frozenset[K]]:
        """Member id -> partitions whose reported offset was found false."""
        return {member_id: frozenset(tps) for member_id, tps in self._false.items() if tps}

    def note(
        self,
        now: float,
        reports: Mapping[str, tuple[str, Mapping[K, int]]],
        *,
        present: Collection[str],
    ) -> None:
        """A rebalance: member -> (client id, offsets above the end known then); all its members.

        A member still suspect keeps the time it first was: rebalances every few seconds must
        not put its verdict off for ever.
        """
        pending: dict[str, _Report[K]] = {}
        false: dict[str, set[K]] = {}
        for member_id, (client_id, offsets) in reports.items():
            known_false = self._false.get(member_id, set())
            if still := known_false & set(offsets):
                false[member_id] = still
            unsettled = {tp: o for tp, o in offsets.items() if tp not in known_false}
            if unsettled:
                known = self._pending.get(member_id)
                first_at = known.first_at if known is not None else now
                pending[member_id] = _Report(first_at, client_id, unsettled)
        self._pending = pending
        self._false = false
        # Member ids are not reused: one that left the group need not be remembered.
        self._named &= set(present)

    def check(self, read_at: float, ends: Mapping[K, int]) -> list[FalseOffsets[K]]:
        """Hold the pending reports against end offsets read (from the broker) at ``read_at``.

        Returns the reports found false now.
        """
        found: list[FalseOffsets[K]] = []
        for member_id, report in list(self._pending.items()):
            above = {
                tp: (offset, ends[tp])
                for tp, offset in report.offsets.items()
                if tp in ends and offset > ends[tp]
            }
            if not above:
                if all(tp in ends for tp in report.offsets):
                    del self._pending[member_id]  # the end passed it: it was merely early
                continue
            if read_at - report.first_at < self.grace_s:
                continue
            del self._pending[member_id]
            self._false.setdefault(member_id, set()).update(above)
            first = member_id not in self._named
            self._named.add(member_id)
            found.append(FalseOffsets(member_id, report.client_id, above, first))
        return found
