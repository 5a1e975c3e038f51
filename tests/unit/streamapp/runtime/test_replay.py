"""What a worker replays and when a restore is over (`streamapp.runtime.replay`)."""

from __future__ import annotations

from faust.types import TP

from streamapp.runtime.replay import Recovery

A = TP("t-changelog", 0)
B = TP("t-changelog", 1)
S = TP("t-changelog", 2)
#: A clock reading after any restore's start (no recovery delay in these tests).
NOW = 1.0


def test_a_restore_is_over_once_every_partition_reached_its_end() -> None:
    recovery = Recovery()
    recovery.begin({A: 10, B: 5}, {A: 3, B: -1})
    assert recovery.in_recovery
    assert recovery.active_remaining() == {A: 6, B: 5}
    assert recovery.partitions_to_read(NOW) == {A, B}
    recovery.applied(A, 9)
    assert recovery.reached(A, 10)
    assert recovery.done(NOW) is None  # B is still short of its end
    assert not recovery.reached(B, 4)
    recovery.applied(B, 4)
    assert recovery.reached(B, 5)
    restore = recovery.done(NOW)
    assert restore is not None and restore.partitions == {A, B}
    assert restore.ended_past_records == {}
    assert not recovery.in_recovery
    assert recovery.settled == {A, B}
    assert recovery.partitions_to_read(NOW) == set()  # restored actives are not read on


def test_an_end_past_the_last_record_is_reached_on_the_position() -> None:
    """Under exactly_once the end is the last stable offset, and the offset below it a commit
    marker that never comes as a record: the position says the replay is over."""
    recovery = Recovery()
    recovery.begin({A: 12}, {A: -1})
    recovery.applied(A, 10)  # the last record; 11 is a marker
    assert recovery.reached(A, 12)
    restore = recovery.done(NOW)
    assert restore is not None and restore.ended_past_records == {A: 12}
    assert recovery.active_offsets[A] == 11


def test_nothing_to_restore_is_over_at_once() -> None:
    recovery = Recovery()
    recovery.begin({}, {})
    restore = recovery.done(NOW)
    assert restore is not None and restore.partitions == set()


def test_standbys_are_read_for_as_long_as_they_are_assigned() -> None:
    recovery = Recovery()
    recovery.standby_tps.add(S)
    recovery.standby_offsets[S] = 4
    recovery.applied(S, 9)
    assert recovery.standby_offsets[S] == 9
    assert recovery.partitions_to_read(NOW) == {S}
    recovery.forget([S])
    assert recovery.partitions_to_read(NOW) == set()
    assert S not in recovery.standby_offsets


def test_a_global_tables_partitions_are_read_on_after_their_restore() -> None:
    recovery = Recovery()
    recovery.begin({A: 3}, {A: -1})
    recovery.read_on.add(A)
    recovery.applied(A, 2)
    recovery.reached(A, 3)
    assert recovery.done(NOW) is not None
    assert recovery.partitions_to_read(NOW) == {A}
    assert A in recovery.active_tps


def test_a_partition_given_up_mid_restore_leaves_the_restore() -> None:
    recovery = Recovery()
    recovery.begin({A: 10, B: 10}, {A: -1, B: -1})
    recovery.forget([B])
    recovery.applied(A, 9)
    recovery.reached(A, 10)
    restore = recovery.done(NOW)
    assert restore is not None and restore.partitions == {A}


def test_a_restore_starts_again_when_its_changelog_was_created_again() -> None:
    recovery = Recovery()
    recovery.begin({A: 30}, {A: 79})  # a store of the old topic, claiming offset 79
    assert recovery.applied_offset(A) == 79
    recovery.restart(A, 0, 12)  # the new topic: offsets 0 to 11
    assert recovery.active_remaining() == {A: 12}
    recovery.applied(A, 11)
    assert recovery.reached(A, 12)
    assert recovery.done(NOW) is not None


def test_a_standby_s_applied_offset_is_its_own() -> None:
    recovery = Recovery()
    recovery.standby_tps.add(S)
    recovery.standby_offsets[S] = 7
    assert recovery.applied_offset(S) == 7
    assert recovery.applied_offset(B) is None


def test_a_restore_waits_for_the_recovery_delay() -> None:
    """Faust's ``stream_recovery_delay``: more members may join or leave meanwhile."""
    recovery = Recovery()
    recovery.begin({A: 5}, {A: -1}, starts_at=10.0)
    assert recovery.partitions_to_read(9.0) == set()
    recovery.applied(A, 4)
    recovery.reached(A, 5)
    assert recovery.done(9.0) is None
    assert recovery.done(10.0) is not None
