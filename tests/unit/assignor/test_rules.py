"""`assignor.rules`: each rule's one home, and the hot loops' inline copies equal to it.

`standby_placement` keeps inline copies of `may_hold_standby` and
`standby_tier` in its two per-task loops (`INLINE_RULES`); with the switch off
those loops call the rules. Generated scenarios, first and second round, must
give the very same result both ways.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import assignor.standby_placement
from assignor import plan
from assignor.rules import (
    StandbyTier,
    best_open_tier,
    caught_up_members,
    is_caught_up,
    may_hold_standby,
    replay_order,
    standby_tier,
    wanted_standbys,
)
from tests.unit.assignor.test_stateful_properties import SETTINGS, Scenario, applied, scenarios


@st.composite
def crowded(draw: st.DrawFn) -> Scenario:
    """One table on few hosts and racks, several standbys, claims, stale state, warmups.

    What makes the placement domains, the warming members and the previous
    standbys matter: the cases the inline copies must decide as the rules do.
    """
    count = draw(st.integers(1, 12))
    topics = {"t": count, "t-changelog": count}
    size = draw(st.integers(2, 8))
    members: dict[str, dict[str, object]] = {}
    for i in range(size):
        partitions = st.lists(st.integers(0, count - 1), max_size=count, unique=True)
        offsets = st.dictionaries(st.integers(0, count - 1).map(str), st.integers(0, 100))
        member: dict[str, object] = {
            "subscription": sorted(topics),
            "host": f"h{draw(st.integers(0, 2))}",
            "generation": 1,
            "owned_standby": {"t-changelog": draw(partitions)},
            "offsets": {"t-changelog": draw(offsets)},
        }
        if draw(st.booleans()):
            member["rack"] = f"r{draw(st.integers(0, 1))}"
        if draw(st.booleans()):
            owned = draw(partitions)
            member["owned_active"] = {"t": owned, "t-changelog": owned}
        members[f"m{i}"] = member
    return {
        "topics": topics,
        "changelog_topics": ["t-changelog"],
        "num_standbys": draw(st.integers(1, 3)),
        "acceptable_recovery_lag": draw(st.integers(0, 50)),
        "end_offsets": {"t-changelog": {str(p): 100 for p in range(count)}},
        "members": members,
    }


def _both_ways(raw: Scenario) -> None:
    inline = plan(raw)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(assignor.standby_placement, "INLINE_RULES", False)
        called = plan(raw)
    assert inline == called


@SETTINGS
@given(scenarios(), st.booleans())
def test_the_inline_copies_decide_as_the_rules_do(raw: Scenario, again: bool) -> None:
    if again:  # a second round: previous standbys, offsets, claims
        raw = applied(plan(raw), raw)
    _both_ways(raw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded(), st.booleans())
def test_the_inline_copies_decide_as_the_rules_do_on_crowded_hosts(
    raw: Scenario, again: bool
) -> None:
    if again:
        raw = applied(plan(raw), raw)
    _both_ways(raw)


def test_wanted_standbys_never_more_than_the_other_eligible_members() -> None:
    assert wanted_standbys(1, 3) == 1
    assert wanted_standbys(5, 3) == 2
    assert wanted_standbys(2, 1) == 0
    assert wanted_standbys(2, 0) == 0
    assert wanted_standbys(0, 4) == 0


def test_may_hold_standby_never_beside_the_active_or_the_warmup_or_twice() -> None:
    assert may_hold_standby(1, active=0)
    assert not may_hold_standby(0, active=0)
    assert not may_hold_standby(2, active=0, warming=2)
    assert not may_hold_standby(3, active=0, taken=[3])
    assert not may_hold_standby(4, active=0, eligible={1, 2})
    assert may_hold_standby(1, active=-1, warming=-1, taken=[2], eligible={1, 2})


def test_standby_tier_another_rack_then_another_host() -> None:
    assert standby_tier(5, 7, hosts={1}, racks={2}) is StandbyTier.NEW_RACK
    assert standby_tier(5, 2, hosts={1}, racks={2}) is StandbyTier.NEW_HOST
    assert standby_tier(1, 2, hosts={1}, racks={2}) is StandbyTier.SHARED_HOST
    assert StandbyTier.NEW_RACK < StandbyTier.NEW_HOST < StandbyTier.SHARED_HOST


@pytest.mark.parametrize(
    ("hosts_used", "racks_used", "distinct_hosts", "distinct_racks"),
    list(itertools.product(range(1, 4), repeat=4)),
)
def test_best_open_tier_is_the_best_any_member_could_reach(
    hosts_used: int, racks_used: int, distinct_hosts: int, distinct_racks: int
) -> None:
    best = best_open_tier(hosts_used, racks_used, distinct_hosts, distinct_racks)
    if racks_used < distinct_racks:
        assert best is StandbyTier.NEW_RACK
    elif hosts_used < distinct_hosts:
        assert best is StandbyTier.NEW_HOST
    else:
        assert best is StandbyTier.SHARED_HOST


def test_caught_up_members_least_lag_first_then_lowest_index() -> None:
    assert is_caught_up(10, 10)
    assert not is_caught_up(11, 10)
    assert caught_up_members({4: 5, 2: 5, 7: 0, 9: 11}, 10) == [7, 2, 4]
    assert caught_up_members({}, 10) == []


def test_replay_order_previous_active_then_warmup_target_then_state_by_lag() -> None:
    assert replay_order(3, 5, {8: 20, 6: 1, 1: 20}) == [3, 5, 6, 1, 8]
    assert replay_order(-1, -1, {2: 0}) == [2]
    assert replay_order(-1, -1, {}) == []
