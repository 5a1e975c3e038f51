"""bench/adclick.py's scale-out phase: latencies split by when their input was produced."""

from __future__ import annotations

import pytest

from bench.lib.latency import (
    Sample,
    Side,
    in_window,
    moved_partitions,
    over,
    percentile,
    side,
    timeline,
)


def test_samples_fall_in_a_window_by_their_input_time_half_open() -> None:
    samples = [(9.9, 1.0), (10.0, 2.0), (14.9, 3.0), (15.0, 4.0)]
    assert in_window(samples, 10.0, 15.0) == [2.0, 3.0]
    assert in_window(samples, 15.0, 20.0) == [4.0]


def test_p99_of_a_hundred_and_one_values_is_the_top_one_but_one() -> None:
    assert percentile([float(v) for v in range(101)], 99) == pytest.approx(99.0)


def test_too_few_values_have_no_percentile() -> None:
    assert percentile([5.0], 99) is None


def test_a_percentile_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="percentile"):
        percentile([1.0, 2.0], 100)


def test_a_partition_moved_when_its_owner_changed_or_it_lost_or_found_one() -> None:
    before = {0: "w1", 1: "w2", 2: "w3"}
    after = {0: "w1", 1: "w4", 3: "w4"}
    assert moved_partitions(before, after) == {1, 2, 3}


def test_moved_and_stayed_partitions_are_measured_apart() -> None:
    samples = [Sample(1.0, 10.0, 0), Sample(1.1, 20.0, 0), Sample(1.2, 900.0, 5)]
    assert side(samples, {5}, moved=True) == Side(1, None, 900.0)
    assert side(samples, {5}, moved=False) == Side(2, pytest.approx(19.9), 20.0)


def test_a_timeline_buckets_samples_by_the_second_of_their_input_from_its_start() -> None:
    samples = [Sample(10.2, 5.0, 0), Sample(11.5, 7.0, 1), Sample(11.9, 300.0, 1)]
    seconds = timeline(samples, 10.0, 12.5, moved={1})
    assert [s.offset_s for s in seconds] == [0, 1, 2]
    assert (seconds[0].stayed.count, seconds[0].moved.count) == (1, 0)
    assert (seconds[1].stayed.count, seconds[1].moved.max_ms) == (0, 300.0)
    assert seconds[2].stayed.count == seconds[2].moved.count == 0


def test_the_slow_samples_of_a_window_come_by_input_time() -> None:
    samples = [Sample(3.0, 500.0, 1), Sample(2.0, 400.0, 0), Sample(2.5, 10.0, 0)]
    assert over(samples, 0.0, 2.9, 100.0) == [Sample(2.0, 400.0, 0)]
    assert over(samples, 0.0, 9.0, 100.0) == [Sample(2.0, 400.0, 0), Sample(3.0, 500.0, 1)]
