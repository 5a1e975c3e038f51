"""The "stopped" figure of bench/rebalance.py: gaps in processing and which partitions count."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.lib import processed_log
from bench.lib.stopped import Stopped, longest_gap, longest_gap_from, stopped, unmoved, worst


def test_longest_gap_is_between_consecutive_events_in_the_window() -> None:
    assert longest_gap([10.0, 10.5, 13.0, 13.2], 10.0, 13.2) == pytest.approx(2.5)


def test_longest_gap_counts_the_window_edges() -> None:
    # Processing stopped before the window's end and had not resumed when it closed.
    assert longest_gap([10.0, 10.1], 10.0, 14.0) == pytest.approx(3.9)
    # Processing resumed only well after the window opened.
    assert longest_gap([13.0, 13.1], 10.0, 13.1) == pytest.approx(3.0)


def test_longest_gap_ignores_events_outside_the_window() -> None:
    assert longest_gap([1.0, 10.2, 10.4, 10.6, 50.0], 10.0, 10.6) == pytest.approx(0.2)


def test_nothing_processed_in_the_window_is_a_stop_of_all_of_it() -> None:
    assert longest_gap([], 10.0, 12.5) == pytest.approx(2.5)
    assert longest_gap([1.0, 20.0], 10.0, 12.5) == pytest.approx(2.5)


def test_a_window_that_ends_before_it_starts_is_refused() -> None:
    with pytest.raises(ValueError, match="ends"):
        longest_gap([], 2.0, 1.0)


def test_unmoved_keeps_partitions_whose_owner_stayed() -> None:
    before = {0: "w1", 1: "w1", 2: "w2", 3: "w3"}
    after = {0: "w1", 1: "w2", 2: "w2", 3: "w1"}
    assert unmoved(before, after) == {0, 2}


def test_a_partition_that_moved_away_and_back_within_the_step_moved() -> None:
    before = {0: "w1", 1: "w1"}
    after = {0: "w1", 1: "w1"}
    held_between = [("w2", [1]), ("w1", [0])]
    assert unmoved(before, after, held_between) == {0}


def test_the_partitions_of_an_interrupted_worker_are_left_out() -> None:
    # A worker killed and restarted at once owns its partitions before and after, but they
    # stopped with it: they say nothing about the rebalance.
    before = {0: "w1", 1: "w3"}
    assert unmoved(before, dict(before), interrupted=["w3"]) == {0}


def test_stopped_is_the_worst_gap_of_the_unmoved_partitions_only() -> None:
    processed = {
        0: [10.0, 10.5, 11.0, 11.5, 12.0],  # never stopped longer than 0.5 s
        1: [10.0, 11.5, 12.0],  # stopped 1.5 s
        2: [10.0, 12.0],  # moved: its 2 s does not count
    }
    result = stopped(processed, [0, 1], 10.0, 12.0)
    assert result == Stopped(seconds=pytest.approx(1.5), partition=1, unmoved=2, began=10.0)


def test_stopped_of_no_partition_is_not_measured() -> None:
    result = stopped({0: [1.0]}, [], 0.0, 2.0)
    assert result == Stopped(None, None, 0)
    assert result.text() == "-"


def test_worst_of_several_windows() -> None:
    a = Stopped(0.4, 3, 8, 20.0)
    b = Stopped(1.2, 5, 7, 31.5)
    assert worst(a, b, Stopped(None, None, 0)) == Stopped(1.2, 5, 7, 31.5)
    assert worst(Stopped(None, None, 0)).seconds is None


def test_processed_log_round_trip_skips_torn_lines(tmp_path: Path) -> None:
    path = tmp_path / "w1.processed"
    with processed_log.open_for_append(path) as log:
        log.write(processed_log.line(3, 100.25, 100.0))
        log.write(processed_log.line(3, 100.05, 100.0))
        log.write(processed_log.line(4, 101.0, 100.5))
        log.write("4 101.")  # a worker killed mid-line
    times = processed_log.processing_times([path, tmp_path / "absent.processed"])
    assert times == {3: [pytest.approx(100.05), pytest.approx(100.25)], 4: [pytest.approx(101.0)]}


def test_longest_gap_from_says_where_the_gap_began() -> None:
    assert longest_gap_from([10.0, 10.5, 13.0, 13.2], 10.0, 13.2) == pytest.approx((2.5, 10.5))
    assert longest_gap_from([], 10.0, 12.5) == pytest.approx((2.5, 10.0))
