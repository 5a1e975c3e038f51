"""bench/adclick.py's scale-out phase: latencies split by when their input was produced."""

from __future__ import annotations

import pytest

from bench.lib.latency import in_window, percentile


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
