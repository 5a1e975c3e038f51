"""The runtime life of replicas on one worker: lag, readiness, follow-up rebalances, recovery cost.

Faust's recovery does the replaying (standbys and warmups are handed to it as standby changelog
partitions); this watches it. Every tick it reads how far each replica got (Faust's
``Recovery.standby_offsets``) against the changelogs' end offsets, logs restore progress, and,
when the plan asked for a follow-up rebalance and the scheduler says it is time, asks the group
to rebalance (aiokafka's ``GroupCoordinator.request_rejoin``, on the consumer's own thread).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from faust.types import TP

from assignor.metadata_codec import MemberAssignment
from standby.followup import FollowupScheduler
from standby.lag import Readiness, lags
from standby.progress import ProgressMeter
from standby.recovery_meter import RecoveryMeter

logger = logging.getLogger(__name__)

#: How often restore progress is logged while a worker is restoring.
PROGRESS_INTERVAL_S = 5.0
#: Rebalances kept for the introspection view.
HISTORY_LENGTH = 20


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


class ReplicaRuntime:
    """Per-worker replica state; fed by the partition assignor, ticked by an app task."""

    def __init__(
        self,
        app: Any,
        *,
        acceptable_recovery_lag: int,
        probing_interval_s: float,
        clock: Any = time.monotonic,
    ) -> None:
        self.app = app
        self.readiness = Readiness(acceptable_recovery_lag)
        self.followup = FollowupScheduler(probing_interval_s)
        self.meter = RecoveryMeter()
        self.clock = clock
        self.share: MemberAssignment | None = None
        self.replica_lag: dict[TP, int] = {}
        #: The changelog end offsets last seen for this worker's replicas (for the metadata).
        self.replica_ends: dict[TP, int] = {}
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
        )
        self.replica_lag = {}
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
        if replicas:
            await self._measure_replicas(recovery, replicas)
        if now - self._last_progress_at >= PROGRESS_INTERVAL_S:
            self._last_progress_at = now
            self._log_progress(recovery, share, now)
        warmups = _tps(share.warmup)
        caught_up = self.readiness.caught_up(self.replica_lag, warmups)
        if self.followup.should_ask(now, warmups_caught_up=caught_up):
            logger.info(
                "streamapp: asking the group for the follow-up rebalance (%s)",
                "warmups caught up" if warmups and caught_up else "probing",
            )
            self.request_rebalance()

    async def _measure_replicas(self, recovery: Any, replicas: set[TP]) -> None:
        try:
            ends = await self.app.consumer.highwaters(*replicas)
        except Exception as exc:  # a rebalance in progress: measure at the next tick
            logger.debug("streamapp: no end offsets for replicas yet: %r", exc)
            return
        local = {
            tp: nxt
            for tp in replicas
            if (nxt := _next(recovery.standby_offsets.get(tp))) is not None
        }
        known_ends = {tp: end for tp, end in ends.items() if end is not None}
        self.replica_lag = lags(local, known_ends)
        self.replica_ends = known_ends

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
        """Ask the group to rebalance, on the consumer thread that owns the coordinator."""
        thread = self.app.consumer._thread
        coordinator = thread._consumer._coordinator
        thread.thread_loop.call_soon_threadsafe(coordinator.request_rejoin)

    # -- introspection --

    def member(self) -> tuple[str | None, int | None]:
        """Kafka's member id and generation of this worker, if it is in a group now."""
        try:
            coordinator = self.app.consumer._thread._consumer._coordinator
        except AttributeError:
            return None, None
        return coordinator.member_id, coordinator.generation
