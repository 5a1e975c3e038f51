"""Which changelog partitions a worker replays, from where, to where, and how far it got.

Three kinds of replay, all read by the fetch loop and applied to the tables' stores:

- an active partition just gained is *restored*: from the offset after its store's own to the
  changelog's end as the rebalance found it (under exactly_once the last stable offset, where
  committed records end). Its source partitions are held until every partition restored for the
  same assignment has reached its end. A restored partition then stays unread: the worker's own
  writes go to its store directly;
- a standby or warmup replica (the assignor's standbys) is *replicated* for as long as it is
  assigned, from its store's offset on;
- every partition of a global table is active on every worker: restored, then read on for the
  other workers' writes.

A replay has reached the end once the consumer's position has: the position passes transaction
markers, aborted and compacted records, which are never handed out as records (so waiting for a
record at the end offset less one would wait forever under exactly_once). The fetch loop takes
every record below the position before it asks, so nothing below it is still to come.

The attributes keep the names of Faust's ``Recovery`` that streamapp's other parts read
(``active_tps``, ``active_offsets``, ``standby_offsets``, ``in_recovery``,
``active_remaining()``), with the same meaning: offsets are the last applied.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from faust.types import TP


@dataclass
class Restore:
    """The restoring of one assignment's gained actives."""

    #: Partition -> the end offset to reach (exclusive).
    ends: dict[TP, int] = field(default_factory=dict)
    #: The partitions restored for this assignment, as the tables are told once it is over.
    partitions: set[TP] = field(default_factory=set)
    #: Partitions whose restore ended on the consumer's position with no record at the end
    #: offset less one (a transaction marker there, or records compacted away): tp -> end.
    ended_past_records: dict[TP, int] = field(default_factory=dict)
    #: When the restore may start reading (Faust's ``stream_recovery_delay`` after the
    #: rebalance: more members may join or leave meanwhile), in ``time.monotonic()`` seconds.
    starts_at: float = 0.0


class Recovery:
    """What the worker replays and how far each replay got (see the module)."""

    def __init__(self) -> None:
        #: Active partitions being restored (and global tables' partitions, read on).
        self.active_tps: set[TP] = set()
        self.standby_tps: set[TP] = set()
        #: Last offset applied, per partition.
        self.active_offsets: dict[TP, int] = {}
        self.standby_offsets: dict[TP, int] = {}
        #: Changelog end less one of each partition being restored (Faust's name).
        self.active_highwaters: dict[TP, int] = {}
        #: Active partitions restored and in use (never replayed again while they stay).
        self.settled: set[TP] = set()
        #: Global tables' partitions: read on once restored.
        self.read_on: set[TP] = set()
        self.restore: Restore | None = None
        #: Set once the first assignment's actives are restored (the worker is ready).
        self.completed = asyncio.Event()
        #: Records applied by replays since the worker started.
        self.records_applied = 0

    @property
    def in_recovery(self) -> bool:
        return self.restore is not None

    def active_remaining(self) -> dict[TP, int]:
        """Records left to restore, per partition being restored."""
        restore = self.restore
        if restore is None:
            return {}
        return {
            tp: max(0, end - 1 - self.active_offsets.get(tp, -1))
            for tp, end in restore.ends.items()
        }

    def active_remaining_total(self) -> int:
        return sum(self.active_remaining().values())

    def partitions_to_read(self, now: float) -> set[TP]:
        reading = set(self.standby_tps) | self.read_on
        if self.restore is not None and now >= self.restore.starts_at:
            reading |= set(self.restore.ends)
        return reading

    def begin(
        self, ends: Mapping[TP, int], applied: Mapping[TP, int], starts_at: float = 0.0
    ) -> None:
        """Restore ``ends``' partitions, whose stores hold up to ``applied`` (-1: nothing),
        from ``starts_at`` on (a restore under way takes them in, and waits as long)."""
        restore = self.restore = self.restore or Restore()
        restore.starts_at = max(restore.starts_at, starts_at)
        for tp, end in ends.items():
            restore.ends[tp] = end
            restore.partitions.add(tp)
            self.active_tps.add(tp)
            self.active_offsets[tp] = applied.get(tp, -1)
            self.active_highwaters[tp] = end - 1

    def applied_offset(self, tp: TP) -> int | None:
        """The last offset applied to the partition's store by its replay (None: not replayed)."""
        if tp in self.standby_tps:
            return self.standby_offsets.get(tp)
        return self.active_offsets.get(tp)

    def restart(self, tp: TP, start: int, end: int) -> None:
        """A restored partition replays again from ``start`` to ``end`` (its changelog was
        created again)."""
        if self.restore is not None and tp in self.restore.ends:
            self.restore.ends[tp] = end
            self.active_offsets[tp] = start - 1
            self.active_highwaters[tp] = end - 1

    def applied(self, tp: TP, offset: int) -> None:
        if tp in self.standby_tps:
            self.standby_offsets[tp] = offset
        else:
            self.active_offsets[tp] = offset

    def reached(self, tp: TP, position: int) -> bool:
        """Note the consumer's position in a restored partition; True once at its end."""
        restore = self.restore
        if restore is None or tp not in restore.ends:
            return False
        end = restore.ends[tp]
        if position < end:
            return False
        del restore.ends[tp]
        applied = self.active_offsets.get(tp, -1)
        if end > 0 and applied < end - 1:
            # Nothing below the end is left to come: the offsets in between held markers.
            restore.ended_past_records[tp] = end
            self.active_offsets[tp] = end - 1
        return True

    def done(self, now: float) -> Restore | None:
        """The restore, once every partition of it reached its end (None: not yet)."""
        restore = self.restore
        if restore is None or restore.ends or now < restore.starts_at:
            return None
        self.restore = None
        self.settled |= restore.partitions
        self.active_tps -= restore.partitions - self.read_on
        return restore

    def forget(self, tps: Iterable[TP]) -> None:
        """Partitions no longer assigned here (or no longer in this role)."""
        for tp in tps:
            self.active_tps.discard(tp)
            self.standby_tps.discard(tp)
            self.settled.discard(tp)
            self.read_on.discard(tp)
            self.active_offsets.pop(tp, None)
            self.standby_offsets.pop(tp, None)
            self.active_highwaters.pop(tp, None)
            if self.restore is not None:
                self.restore.ends.pop(tp, None)
                self.restore.partitions.discard(tp)
