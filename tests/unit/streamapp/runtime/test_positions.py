"""Records deleted before the group read them are named (`streamapp.runtime.positions`)."""

from __future__ import annotations

from streamapp.runtime.positions import deleted_before_read


def test_a_committed_offset_below_the_log_start_names_the_records_lost() -> None:
    committed = {"a": 5, "b": 12, "c": None, "d": -1}
    starts = {"a": 12, "b": 12, "c": 3, "d": 3}
    assert deleted_before_read(committed, starts) == {"a": (5, 12)}


def test_an_unknown_log_start_names_nothing() -> None:
    assert deleted_before_read({"a": 5}, {}) == {}
