"""The synthetic traffic: deterministic, and carrying every case the join must handle."""

from __future__ import annotations

import pytest

from examples.adclick.events import CLICKS, IMPRESSIONS, TrafficConfig, plan_traffic
from examples.adclick.model import DecodeError, decode_click, decode_impression


def test_same_seed_same_records_other_seed_other_records() -> None:
    cfg = TrafficConfig(events=3_000, seed=11, base_time_ms=1_000_000)
    assert plan_traffic(cfg) == plan_traffic(cfg)
    other, _ = plan_traffic(TrafficConfig(events=3_000, seed=12, base_time_ms=1_000_000))
    assert other != plan_traffic(cfg)[0]


def test_exact_count_in_arrival_order() -> None:
    records, truth = plan_traffic(TrafficConfig(events=2_500, base_time_ms=5))
    assert len(records) == 2_500
    arrivals = [r.arrival_ms for r in records]
    assert arrivals == sorted(arrivals)
    assert truth.impressions + truth.clicks + truth.undecodable == 2_500


def test_traffic_has_every_case_the_join_handles() -> None:
    cfg = TrafficConfig(events=20_000, late_fraction=0.1, bad_fraction=0.005, base_time_ms=0)
    records, truth = plan_traffic(cfg)
    assert truth.in_window_clicks > 1_000
    assert truth.late_clicks > 100
    assert truth.orphan_clicks > 50
    assert truth.early_arrivals > 50
    assert truth.undecodable > 20
    assert sum(truth.per_campaign_clicks.values()) == truth.in_window_clicks
    topics = {r.topic for r in records}
    assert topics == {IMPRESSIONS, CLICKS}


def test_disorder_stays_within_grace() -> None:
    cfg = TrafficConfig(events=10_000, base_time_ms=0)
    records, _ = plan_traffic(cfg)
    highest = {IMPRESSIONS: -1, CLICKS: -1}
    for r in records:
        try:
            t = (decode_impression if r.topic == IMPRESSIONS else decode_click)(r.value)
        except DecodeError:
            continue
        # Within one topic, no record is older than the newest seen by more than grace.
        assert t.event_time_ms >= highest[r.topic] - cfg.grace_ms
        highest[r.topic] = max(highest[r.topic], t.event_time_ms)


def test_late_fraction_is_honoured() -> None:
    _, none_late = plan_traffic(TrafficConfig(events=20_000, late_fraction=0.0))
    _, many_late = plan_traffic(TrafficConfig(events=20_000, late_fraction=0.5))
    assert none_late.late_clicks == 0
    assert many_late.late_clicks > many_late.in_window_clicks * 0.5


def test_bad_config_is_refused() -> None:
    with pytest.raises(ValueError, match="late_fraction"):
        TrafficConfig(events=1, late_fraction=1.5)
    with pytest.raises(ValueError):
        TrafficConfig(events=1, rate=0)
