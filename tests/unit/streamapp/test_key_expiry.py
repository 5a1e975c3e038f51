"""streamapp.key_expiry: which windowed keys expire when, per partition (no I/O)."""

from __future__ import annotations

from streamapp.key_expiry import KeyExpiry, is_window_key, window_key


def test_keys_are_due_once_their_end_is_stale_earliest_first() -> None:
    expiry = KeyExpiry()
    expiry.note_set(("b", (10.0, 19.9)), 1)
    expiry.note_set(("a", (0.0, 9.9)), 1)
    expiry.note_set(("a", (0.0, 9.9)), 1)  # written again: noted once
    expiry.note_set(("c", (0.0, 9.9)), 2)
    assert len(expiry) == 3
    assert expiry.take_due(lambda end: end <= 5.0) == []
    assert expiry.take_due(lambda end: end <= 15.0) == [
        (1, [("a", (0.0, 9.9))]),
        (2, [("c", (0.0, 9.9))]),
    ]
    assert expiry.take_due(lambda end: end <= 15.0) == []  # taken: not due twice
    assert expiry.take_due(lambda end: end <= 100.0) == [(1, [("b", (10.0, 19.9))])]
    assert len(expiry) == 0


def test_a_deleted_key_is_not_due_and_a_key_written_after_its_end_was_taken_is() -> None:
    expiry = KeyExpiry()
    expiry.note_set(("a", (0.0, 9.9)), 0)
    expiry.note_set(("b", (0.0, 9.9)), 0)
    expiry.note_del(("a", (0.0, 9.9)), 0)
    expiry.note_del(("never", (0.0, 9.9)), 3)  # nothing noted there: nothing to do
    assert expiry.take_due(lambda end: True) == [(0, [("b", (0.0, 9.9))])]
    expiry.note_set(("late", (0.0, 9.9)), 0)  # a late write to a window already expired
    assert expiry.take_due(lambda end: True) == [(0, [("late", (0.0, 9.9))])]


def test_the_latest_end_is_per_partition() -> None:
    expiry = KeyExpiry()
    assert expiry.latest_end(0) == 0.0
    expiry.note_set(("a", (10.0, 19.9)), 0)
    expiry.note_set(("a", (0.0, 9.9)), 0)
    expiry.note_set(("a", (20.0, 29.9)), 1)
    assert (expiry.latest_end(0), expiry.latest_end(1)) == (19.9, 29.9)


def test_a_rebuild_holds_exactly_the_keys_held_in_the_active_partitions() -> None:
    expiry = KeyExpiry()
    expiry.note_set(("gone", (0.0, 9.9)), 0)  # partition 0 moved away
    expiry.note_set(("stale-note", (0.0, 9.9)), 1)  # no longer in partition 1's store
    count = expiry.rebuild(
        [1, 2],
        {
            1: [("kept", (0.0, 9.9)), ("kept", (10.0, 19.9))],
            2: [("recovered", (30.0, 39.9))],
            3: [("not-active", (0.0, 9.9))],
        },
    )
    assert count == 3 and len(expiry) == 3
    assert expiry.latest_end(0) == 0.0  # dropped with its partition
    assert (expiry.latest_end(1), expiry.latest_end(2)) == (19.9, 39.9)
    assert expiry.take_due(lambda end: True) == [
        (1, [("kept", (0.0, 9.9))]),
        (1, [("kept", (10.0, 19.9))]),
        (2, [("recovered", (30.0, 39.9))]),
    ]


def test_stored_keys_become_the_tuples_the_table_holds() -> None:
    assert window_key(["k", [0.0, 9.9]]) == ("k", (0.0, 9.9))
    assert window_key(["k", 1]) == ("k", 1)
    assert window_key("plain") == "plain"
    assert is_window_key(("k", (0.0, 9.9)))
    assert not is_window_key(("k", 1)) and not is_window_key("plain")
