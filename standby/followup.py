"""When a worker asks its group for the follow-up rebalance a plan wanted.

Kafka Streams' model (KIP-441): a plan that parks a task on a caught-up member while a warmup
replica builds state elsewhere asks for a follow-up; the warmup's holder asks as soon as all its
warmups are caught up, and everybody probes at ``probing.rebalance.interval.ms`` in case nobody
does. A rebalance stops every member's processing, so asks are rate limited: at most one per
assignment, never sooner than ``min_gap_s`` after the last rebalance.

A warmup that never gets closer to its changelog's end (its holder does not replay it, or the
plan keeps seeing it behind however far it got) would have the group rebalance every few
seconds for ever. So after ``max_fruitless_asks`` asks in a row, for the same warmups, without
any warmup's lag going down, a worker stops asking (`stalled`) until a warmup moves again or an
assignment brings other warmups.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: A warmup that flips in and out of "caught up" must not have the group rebalance back to back.
DEFAULT_MIN_GAP_S = 2.0
#: Follow-ups asked in a row with no warmup getting closer before a worker stops asking.
DEFAULT_MAX_FRUITLESS_ASKS = 3

#: Which warmups a plan gave: this worker's own (by partition, and how many) and the group's count.
_WarmupsKey = tuple[frozenset[Hashable], int, int]


@dataclass
class FollowupScheduler:
    probing_interval_s: float
    min_gap_s: float = DEFAULT_MIN_GAP_S
    max_fruitless_asks: int = DEFAULT_MAX_FRUITLESS_ASKS
    _assigned_at: float | None = field(default=None, init=False)
    _followup: bool = field(default=False, init=False)
    _own_warmups: bool = field(default=False, init=False)
    _group_warmups: bool = field(default=False, init=False)
    _asked: bool = field(default=False, init=False)
    _warmups: _WarmupsKey | None = field(default=None, init=False)
    #: Asks in a row for the current warmups with no lag going down since the ask before.
    _fruitless: int = field(default=0, init=False)
    #: The warmups' lags when this worker last asked (None: not asked for these warmups yet).
    _lags_at_ask: dict[Hashable, int] | None = field(default=None, init=False)
    _stalled: bool = field(default=False, init=False)

    def on_assignment(
        self,
        now: float,
        *,
        followup: bool,
        own_warmups: int,
        group_warmups: int,
        warmups: Collection[Hashable] = (),
    ) -> None:
        """A new assignment; ``warmups``: this worker's own warmup partitions, if it knows them."""
        self._assigned_at = now
        self._followup = followup
        self._own_warmups = own_warmups > 0
        self._group_warmups = group_warmups > 0
        self._asked = False
        key = (frozenset(warmups), own_warmups, group_warmups)
        if key != self._warmups:
            # Other warmups: whatever stalled the last ones says nothing about these.
            self._warmups = key
            self._fruitless = 0
            self._lags_at_ask = None
            self._stalled = False

    @property
    def pending(self) -> bool:
        """The current plan wants a follow-up and this worker will ask for it."""
        return (
            self._followup
            and not self._asked
            and not self._stalled
            and self._assigned_at is not None
        )

    @property
    def coming(self) -> bool:
        """The current plan wants a follow-up that has not come yet: this worker will ask for
        it, or asked and the group's rebalance has not reached it (its next assignment ends
        both). What the view reports: between the ask and that rebalance, `pending` is already
        false while the group is about to move partitions."""
        return self._followup and not self._stalled and self._assigned_at is not None

    @property
    def stalled(self) -> bool:
        """Asking stopped: the last follow-ups for these warmups brought none of them closer."""
        return self._stalled

    def should_ask(
        self,
        now: float,
        *,
        warmups_caught_up: bool,
        # Keys are the caller's partition ids (Any: Mapping is invariant in its key type).
        warmup_lags: Mapping[Any, int] | None = None,
    ) -> bool:
        """Whether to ask for the follow-up now; a True answer counts as the ask.

        ``warmup_lags``: this worker's warmups, each with how far it still is from counting as
        caught up (0 once it does, so a caught-up warmup's noise is not progress).
        """
        lags = dict(warmup_lags or {})
        if self._stalled:
            if not _closer(self._lags_at_ask, lags):
                return False
            # A warmup moved after all: back to asking as usual.
            self._stalled = False
            self._fruitless = 0
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
        if not due:
            return False
        if self._own_warmups or self._group_warmups:
            if self._lags_at_ask is not None and _closer(self._lags_at_ask, lags):
                self._fruitless = 0
            if self._fruitless >= self.max_fruitless_asks:
                self._stalled = True
                return False
            self._fruitless += 1
            self._lags_at_ask = lags
        self._asked = True
        return True


def _closer(before: Mapping[Hashable, int] | None, now: Mapping[Hashable, int]) -> bool:
    """Some warmup's lag went down since ``before``."""
    if before is None:
        return False
    return any(tp in before and lag < before[tp] for tp, lag in now.items())
