"""The assignment rules that more than one pass applies, each decided here and only here.

docs/assignment-rules.md numbers the rules a plan keeps; where a rule is a
predicate or a value that several passes need, this module is its one home and
the passes call it. Members are whatever the caller indexes them by (the
placement passes use small ints); nothing here reads a scenario.

- `wanted_standbys`: how many standbys a stateful task gets (rule 4).
- `may_hold_standby`: who may hold a standby of a task at all (rule 4).
- `StandbyTier`, `standby_tier`, `best_open_tier`: how good a candidate's
  placement domain is (another rack, else another host), and the best one a
  task can still reach (rule 4).
- `is_caught_up`, `caught_up_members`: who can take a task without a replay,
  and in which order a task that must move looks for one (rules 6 and 7).
- `replay_order`: the members a standby of a task tries first, those with its
  state on disk (rule 4 with rule 6).

Two hot loops of `assignor.standby_placement` (`_keep_previous`,
`_fill_from_heap`) carry inline copies of `may_hold_standby` and
`standby_tier`: they run once per task, and bench/plan_scale.py showed the
calls cost 14-18% of a 100,000-task plan there. `standby_placement.INLINE_RULES
= False` switches both to the calls; tests/unit/assignor/test_rules.py runs
generated scenarios both ways and requires equal results. Nowhere else is a
rule written out again.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping
from enum import IntEnum

__all__ = [
    "StandbyTier",
    "best_open_tier",
    "caught_up_members",
    "is_caught_up",
    "may_hold_standby",
    "replay_order",
    "standby_tier",
    "wanted_standbys",
]


# --------------------------------------------------------------------------- rule 4: standbys


def wanted_standbys(num_standbys: int, eligible: int) -> int:
    """Standbys a stateful task gets: ``num_standbys``, at most one per eligible member but
    its active, never below zero."""
    return max(min(num_standbys, eligible - 1), 0)


def may_hold_standby(
    member: int,
    *,
    active: int,
    warming: int = -1,
    taken: Collection[int] = (),
    eligible: Container[int] | None = None,
) -> bool:
    """Whether ``member`` may hold a standby of a task at all.

    Never the task's ``active`` member; never the member ``warming`` up for it
    (it holds a warmup replica, one copy each); never twice (``taken``: the
    task's standbys so far); only a member ``eligible`` for the task's group
    (None: every member). -1 for ``active`` or ``warming`` means nobody.
    """
    if member in (active, warming) or member in taken:
        return False
    return eligible is None or member in eligible


class StandbyTier(IntEnum):
    """How a candidate standby's placement domain compares with the task's other copies.

    Lower is better: a standby goes to the best tier any candidate still
    reaches (`best_open_tier`), then to the least loaded member in it. A
    member without a host is its own host; a host sits in one rack
    (`standby_placement._Domains`), so another rack is always another host.
    """

    #: a rack none of the task's copies uses
    NEW_RACK = 0
    #: a used rack, but a host none of the task's copies uses
    NEW_HOST = 1
    #: a host a copy already uses: only the member differs
    SHARED_HOST = 2


_NEW_RACK, _NEW_HOST, _SHARED_HOST = StandbyTier


def standby_tier(host: int, rack: int, hosts: Container[int], racks: Container[int]) -> StandbyTier:
    """The tier of a candidate on ``host`` and ``rack``, given the domains of the task's copies."""
    if rack not in racks:
        return _NEW_RACK
    return _NEW_HOST if host not in hosts else _SHARED_HOST


def best_open_tier(
    hosts_used: int, racks_used: int, distinct_hosts: int, distinct_racks: int
) -> StandbyTier:
    """The best tier a task whose copies use so many hosts and racks can still reach,
    among eligible members spread over ``distinct_hosts`` hosts and ``distinct_racks`` racks."""
    if racks_used < distinct_racks:
        return _NEW_RACK
    return _NEW_HOST if hosts_used < distinct_hosts else _SHARED_HOST


# --------------------------------------------------------------------------- rules 6 and 7: state


def is_caught_up(lag: int, acceptable_lag: int) -> bool:
    """A member ``lag`` records behind a task's changelog end can take it without a replay."""
    return lag <= acceptable_lag


def caught_up_members(lags: Mapping[int, int], acceptable_lag: int) -> list[int]:
    """Members caught up on a task (``lags``: member -> lag), least lag first, then lowest index.

    The order in which a task that must move looks for its next holder (rule
    6), and among which a task held back for a warmup stays (rule 7).
    """
    return [m for lag, m in sorted((lag, m) for m, lag in lags.items() if lag <= acceptable_lag)]


def replay_order(previous_owner: int, warming: int, lags: Mapping[int, int]) -> list[int]:
    """The members a standby of a task tries first: those with its state on disk.

    Its previous active, then the member its active is held back for (it
    replays the task anyway), then every member with local state for it, least
    lag first, caught up or not. -1 means nobody; a member may appear twice,
    the placement takes it once.
    """
    preferred = [previous_owner] if previous_owner != -1 else []
    if warming != -1:
        preferred.append(warming)
    if len(lags) > 1:
        preferred.extend(sorted(lags, key=lambda m: (lags[m], m)))
    else:
        preferred.extend(lags)
    return preferred
