"""The runtime life of replicas on one worker: lag, readiness, follow-up rebalances, recovery cost.

Faust's recovery does the replaying (standbys and warmups are handed to it as standby changelog
partitions); this watches it. Every tick it reads the end offsets of every changelog partition
of the app's tables from the broker, measures how far each replica got (Faust's
``Recovery.standby_offsets``) against them, logs restore progress, and, when the plan asked for
a follow-up rebalance and the scheduler says it is time, asks the group to rebalance (aiokafka's
``GroupCoordinator.request_rejoin``, on the consumer's own thread).

The end offsets are also what the group leader plans with (`changelog_ends`): its ``assign()``
runs synchronously on aiokafka's consumer thread, inside the rebalance, and cannot ask the
broker itself. And the leader hands back the offsets members reported above those ends
(`note_offsets_beyond_end`); a report the broker's end has still not reached a while later is
false: the member is named, and its local state for those partitions stops counting
(`false_offsets`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from faust.types import TP

from assignor.faust_names import is_leader_topic
from assignor.metadata_codec import MemberAssignment
from standby.followup import FollowupScheduler
from standby.lag import FalseOffsets, OffsetReportCheck, Readiness, lags
from standby.progress import ProgressMeter
from standby.recovery_meter import RecoveryMeter
from standby.replica_offsets import applied_next

logger = logging.getLogger(__name__)

#: How often restore progress is logged while a worker is restoring.
PROGRESS_INTERVAL_S = 5.0
#: Rebalances kept for the introspection view.
HISTORY_LENGTH = 20
#: How long the broker's end may stay below a member's reported offset before the report is
#: called false. Honest reports run ahead of the end the leader had by the writes since its last
#: read (a tick), and under exactly-once by an open transaction until its commit (seconds).
OFFSET_REPORT_GRACE_S = 15.0
#: Bound on one read of end offsets: a broker that does not answer delays a tick, not all of them.
END_OFFSETS_TIMEOUT_S = 5.0


def _next(offset: int | None) -> int | None:
    """Faust keeps the last applied offset (-1 for none); the next offset is one past it."""
    return None if offset is None else max(0, offset + 1)


def by_topic(tps: Iterable[TP]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(tps):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def _tps(tps: Mapping[str, Sequence[int]]) -> set[TP]:
    return {TP(topic, p) for topic, ps in tps.items() for p in ps}


def _tasks_text(tps: Iterable[TP]) -> str:
    """``"orders 0, 1; totals-changelog 2"``: partitions by topic, Faust's leader topic left out."""
    parts = {t: ps for t, ps in by_topic(tps).items() if not is_leader_topic(t)}
    return "; ".join(f"{t} {', '.join(map(str, ps))}" for t, ps in sorted(parts.items())) or "-"


def rebalanced_text(before: MemberAssignment | None, after: MemberAssignment) -> str:
    """One line for a worker's log: what it holds after a rebalance and what moved in or out."""
    held = _tps(before.active) if before is not None else set()
    now = _tps(after.active)
    return (
        f"streamapp: rebalanced (plan generation {after.generation}): "
        f"active {_tasks_text(now)} | standby {_tasks_text(_tps(after.standby))} | "
        f"warmup {_tasks_text(_tps(after.warmup))} | "
        f"moved in {_tasks_text(now - held)} | moved out {_tasks_text(held - now)}"
    )


def _warmup_lags_text(warmups: set[TP], lag: Mapping[TP, int], group_warmups: int) -> str:
    if not warmups:
        return f"the {group_warmups} warmup(s) of the group are on other workers"
    return "lag: " + ", ".join(
        f"{tp.topic}[{tp.partition}]={lag.get(tp, 'unknown')}" for tp in sorted(warmups)
    )


def _false_offsets_text(false: FalseOffsets[TP]) -> str:
    shown = sorted(false.offsets.items())[:3]
    more = len(false.offsets) - len(shown)
    return (
        f"member {false.member_id} (client {false.client_id}) reports changelog offsets the "
        "broker does not have ("
        + ", ".join(f"{tp.topic}[{tp.partition}] at {off}, end {end}" for tp, (off, end) in shown)
        + (f", and {more} more" if more > 0 else "")
        + "): its local state is not this cluster's or is damaged (a data dir from another "
        "cluster, a topic deleted and created again), or its metadata is false; that state "
        "does not count (a damaged store is rebuilt once its partition is assigned)"
    )


class ReplicaRuntime:
    """Per-worker replica state; fed by the partition assignor, ticked by an app task."""

    def __init__(
        self,
        app: Any,
        *,
        acceptable_recovery_lag: int,
        probing_interval_s: float,
        clock: Any = time.monotonic,
        wall_clock: Any = time.time,
    ) -> None:
        self.app = app
        self.readiness = Readiness(acceptable_recovery_lag)
        self.followup = FollowupScheduler(probing_interval_s)
        self.meter = RecoveryMeter()
        self.clock = clock
        self.wall_clock = wall_clock
        self.share: MemberAssignment | None = None
        #: The share the last "rebalanced" line reported (what moved is measured from it).
        self._logged_share: MemberAssignment | None = None
        self.replica_lag: dict[TP, int] = {}
        #: The changelog end offsets last seen for this worker's replicas (for the metadata).
        self.replica_ends: dict[TP, int] = {}
        #: The next offset recovery has to apply of each replica, as of the last tick (ahead of
        #: its store's by Faust's standby buffer; see `standby.replica_offsets`). Replaced, never
        #: changed in place: the join metadata reads it from the consumer thread.
        self.replica_applied: dict[TP, int] = {}
        #: The broker's end offset of every changelog partition of the app's tables, as last
        #: read. Replaced, never changed in place: the leader reads it from the consumer thread.
        self.changelog_ends: dict[TP, int] = {}
        self._offset_reports: OffsetReportCheck[TP] = OffsetReportCheck(OFFSET_REPORT_GRACE_S)
        # Fed from the consumer thread (the leader's assign()), checked on the main loop.
        self._offset_reports_lock = threading.Lock()
        self._active_progress = ProgressMeter()
        self._replica_progress = ProgressMeter()
        self._last_progress_at = 0.0
        self._start_next: dict[TP, int] = {}
        #: The last rebalances this worker went through: what it held, what recovery cost.
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY_LENGTH)

    # -- fed by the partition assignor (consumer thread) and Faust's signals (main loop) --

    def on_assignment(self, share: MemberAssignment) -> None:
        """This worker's share of a new plan (from streamapp's partition assignor)."""
        self.share = share
        self.followup.on_assignment(
            self.clock(),
            followup=share.followup_rebalance,
            own_warmups=sum(len(ps) for ps in share.warmup.values()),
            group_warmups=share.warmups_in_group,
            warmups=_tps(share.warmup),
        )
        # The lags and the ends they were measured against go together (the view shows both).
        self.replica_lag = {}
        self.replica_ends = {}
        self._replica_progress.reset()

    def on_assigned(self, *args: Any, **kwargs: Any) -> None:
        """Faust has applied an assignment: recovery starts from each active's local state.

        Faust's recovery has just read every active changelog partition's persisted offset and
        not fetched anything yet; that is where its replay starts, whichever assignor decided.
        """
        recovery = self.app.tables.recovery
        self._start_next = {
            tp: _next(recovery.active_offsets.get(tp)) or 0 for tp in recovery.active_tps
        }
        self.meter.on_assigned(self.clock(), self._start_next)
        self._active_progress.reset()
        share = self.share
        if share is not None and share is not self._logged_share:
            # The share is the one Faust now applies (the assignor hands it over first).
            logger.info(rebalanced_text(self._logged_share, share))
            self._logged_share = share

    def on_revoked(self, *args: Any, **kwargs: Any) -> None:
        self.meter.on_revoked(self.clock())

    async def on_resumed(self, *args: Any, **kwargs: Any) -> None:
        recovery = self.app.tables.recovery
        applied = {
            tp: nxt
            for tp, off in recovery.active_offsets.items()
            if (nxt := _next(off)) is not None
        }
        if not self.meter.on_resumed(self.clock(), applied):
            return
        logger.info(
            "streamapp: processing resumed after %.2f s, %s changelog records replayed",
            self.meter.last_seconds_to_resume or 0.0,
            self.meter.last_records_replayed,
        )
        share = self.share
        self.history.append(
            {
                "generation": self.member()[1],
                "plan_generation": share.generation if share else None,
                # The protocol the plan told the group to run next: eager until every member
                # speaks cooperative (the rolling-upgrade test reads when it turned).
                "group_protocol": share.group_protocol if share else None,
                # Wall-clock seconds (epoch) it resumed at, for the group page's history.
                "at": round(self.wall_clock(), 3),
                "active": by_topic(self.app.assignor.assigned_actives()),
                "warmup": dict(share.warmup) if share else {},
                **self.meter.last_rebalance_json(),
            }
        )

    # -- the tick (main loop) --

    async def tick(self) -> None:
        share = self.share
        if share is None:
            return
        now = self.clock()
        recovery = self.app.tables.recovery
        replicas = _tps(share.standby) | _tps(share.warmup)
        self.replica_applied = applied_next(recovery.standby_offsets, recovery.standby_tps)
        ends = await self._read_end_offsets(replicas)
        if ends is not None:
            self._check_offset_reports(now, ends)
            if replicas:
                self._measure_replicas(recovery, replicas, ends)
        if now - self._last_progress_at >= PROGRESS_INTERVAL_S:
            self._last_progress_at = now
            self._log_progress(recovery, share, now)
        warmups = _tps(share.warmup)
        caught_up = self.readiness.caught_up(self.replica_lag, warmups)
        was_stalled = self.followup.stalled
        warmup_lags = {tp: lag for tp, lag in self.replica_lag.items() if tp in warmups}
        if self.followup.should_ask(
            now,
            warmups_caught_up=caught_up,
            warmup_lags=self.readiness.beyond(warmup_lags),
        ):
            logger.info(
                "streamapp: asking the group for the follow-up rebalance (%s)",
                "warmups caught up" if warmups and caught_up else "probing",
            )
            self.request_rebalance()
        elif self.followup.stalled and not was_stalled:
            logger.warning(
                "streamapp: no more follow-up rebalances: %d asked in a row and no warmup got "
                "closer to its changelog's end (%s); asking again once a warmup moves or a "
                "rebalance brings other warmups",
                self.followup.max_fruitless_asks,
                _warmup_lags_text(warmups, self.replica_lag, share.warmups_in_group),
            )

    async def _read_end_offsets(self, replicas: set[TP]) -> dict[TP, int] | None:
        """The broker's end offsets of every changelog partition (and replica); None: none now."""
        consumer = self.app.consumer
        if not getattr(consumer, "started", False):
            return None  # not consuming yet: nobody to ask through
        tps = self._changelog_partitions(consumer) | replicas
        if not tps:
            return {}
        try:
            ends = await asyncio.wait_for(consumer.highwaters(*tps), END_OFFSETS_TIMEOUT_S)
        except Exception as exc:  # a rebalance in progress, a slow broker: the next tick
            logger.debug("streamapp: no changelog end offsets this tick: %r", exc)
            return None
        known = {tp: end for tp, end in ends.items() if isinstance(end, int) and end >= 0}
        self.changelog_ends = known
        return known

    def _changelog_partitions(self, consumer: Any) -> set[TP]:
        """Every partition of the changelogs the group leader plans (global tables' are not)."""
        tps: set[TP] = set()
        for table in self.app.tables.values():
            if table.is_global:
                continue
            topic = table.changelog_topic.get_topic_name()
            count = (
                consumer.topic_partitions(topic)  # what the broker said, once subscribed
                or table.changelog_topic.partitions
                or self.app.conf.topic_partitions
            )
            tps.update(TP(topic, p) for p in range(count))
        return tps

    def _measure_replicas(self, recovery: Any, replicas: set[TP], ends: Mapping[TP, int]) -> None:
        local = {
            tp: nxt
            for tp in replicas
            if (nxt := _next(recovery.standby_offsets.get(tp))) is not None
        }
        known_ends = {tp: end for tp, end in ends.items() if tp in replicas}
        self.replica_lag = lags(local, known_ends)
        self.replica_ends = known_ends

    # -- the group leader's check of members' offsets --

    @property
    def false_offsets(self) -> dict[str, frozenset[TP]]:
        """Member id -> changelog partitions whose offset it reported was found false."""
        with self._offset_reports_lock:
            return self._offset_reports.false_offsets

    def note_offsets_beyond_end(
        self,
        reports: Mapping[str, tuple[str, Mapping[str, Mapping[int, int]]]],
        *,
        present: Iterable[str],
    ) -> None:
        """From the leader's assign(): member -> (client id, topic -> partition -> offset) it
        reported above `changelog_ends`; ``present``: every member of that rebalance."""
        flat = {
            member_id: (
                client_id,
                {TP(t, p): o for t, ps in offsets.items() for p, o in ps.items()},
            )
            for member_id, (client_id, offsets) in reports.items()
        }
        with self._offset_reports_lock:
            self._offset_reports.note(self.clock(), flat, present=set(present))

    def _check_offset_reports(self, read_at: float, ends: Mapping[TP, int]) -> None:
        with self._offset_reports_lock:
            found = self._offset_reports.check(read_at, ends)
        for false in found:
            if false.first:
                logger.warning("streamapp: %s", _false_offsets_text(false))
        if found:
            # It may hold tasks as caught up that it is not: the next plan knows better.
            self.request_rebalance()

    def _log_progress(self, recovery: Any, share: MemberAssignment, now: float) -> None:
        if recovery.in_recovery:
            remaining = recovery.active_remaining()
            done = sum(
                max(0, (_next(recovery.active_offsets.get(tp)) or 0) - start)
                for tp, start in self._start_next.items()
            )
            logger.info(
                "streamapp: %s",
                self._active_progress.line(
                    now, "actives", len(remaining), done, sum(remaining.values())
                ),
            )
        behind = {
            tp: lag
            for tp, lag in self.replica_lag.items()
            if lag > self.readiness.acceptable_recovery_lag
        }
        if behind:
            done = sum(_next(recovery.standby_offsets.get(tp)) or 0 for tp in behind)
            warm = len(_tps(share.warmup) & set(behind))
            logger.info(
                "streamapp: %s",
                self._replica_progress.line(
                    now,
                    f"replicas ({warm} warmup)",
                    len(behind),
                    done,
                    sum(behind.values()),
                ),
            )

    def request_rebalance(self) -> None:
        """Ask the group to rebalance."""
        self.app.consumer.request_rebalance()

    # -- introspection --

    def member(self) -> tuple[str | None, int | None]:
        """Kafka's member id and generation of this worker, if it is in a group now."""
        membership = getattr(self.app.consumer, "membership", None)
        if membership is None:  # a consumer that cannot tell (stock Faust's)
            return None, None
        member: tuple[str | None, int | None] = membership()
        return member
