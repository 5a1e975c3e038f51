"""When a worker asks its group for the follow-up rebalance a plan wanted.

Kafka Streams' model (KIP-441): a plan that parks a task on a caught-up member while a warmup
replica builds state elsewhere asks for a follow-up; the warmup's holder asks as soon as all its
warmups are caught up, and everybody probes at ``probing.rebalance.interval.ms`` in case nobody
does. A rebalance stops every member's processing, so asks are rate limited: at most one per
assignment, never sooner than ``min_gap_s`` after the last rebalance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: A warmup that flips in and out of "caught up" must not have the group rebalance back to back.
DEFAULT_MIN_GAP_S = 2.0


@dataclass
class FollowupScheduler:
    probing_interval_s: float
    min_gap_s: float = DEFAULT_MIN_GAP_S
    _assigned_at: float | None = field(default=None, init=False)
    _followup: bool = field(default=False, init=False)
    _own_warmups: bool = field(default=False, init=False)
    _group_warmups: bool = field(default=False, init=False)
    _asked: bool = field(default=False, init=False)

    def on_assignment(
        self, now: float, *, followup: bool, own_warmups: int, group_warmups: int
    ) -> None:
        self._assigned_at = now
        self._followup = followup
        self._own_warmups = own_warmups > 0
        self._group_warmups = group_warmups > 0
        self._asked = False

    @property
    def pending(self) -> bool:
        """The current plan wants a follow-up and this worker has not asked for it yet."""
        return self._followup and not self._asked and self._assigned_at is not None

    def should_ask(self, now: float, *, warmups_caught_up: bool) -> bool:
        """Whether to ask for the follow-up now; a True answer counts as the ask."""
        if not self.pending or self._assigned_at is None:
            return False
        waited = now - self._assigned_at
        if waited < self.min_gap_s:
            return False
        if self._own_warmups:
            due = warmups_caught_up or waited >= self.probing_interval_s
        elif self._group_warmups:
            # Another member's warmup: its holder knows when it is ready; we only probe.
            due = waited >= self.probing_interval_s
        else:
            # A step with no warmups (e.g. cooperative revocations) is done once applied.
            due = True
        if due:
            self._asked = True
        return due
