"""Wire format and topology checks: bad input gets one clear error, never a crash elsewhere."""

from __future__ import annotations

import pytest

from examples.adclick.model import (
    Attribution,
    Click,
    DecodeError,
    Impression,
    decode_attribution,
    decode_click,
    decode_impression,
    encode,
)
from examples.adclick.topology import CopartitionError, Topology, check_copartitioned


def test_records_round_trip() -> None:
    imp = Impression("a1", "campaign-01", 10, 1_000)
    clk = Click("c1", "a1", 1_500)
    assert decode_impression(encode(imp)) == imp
    assert decode_click(encode(clk)) == clk
    att = Attribution.of(imp, clk)
    assert decode_attribution(encode(att)) == att


@pytest.mark.parametrize(
    "raw",
    [
        None,
        b"\xff\xfe",
        b"[1, 2]",
        b'{"auction_id": "a1", "campaign": "x", "cost_micros": "10", "event_time_ms": 1}',
        b'{"auction_id": "a1", "campaign": "x", "cost_micros": true, "event_time_ms": 1}',
        b'{"auction_id": "", "campaign": "x", "cost_micros": 1, "event_time_ms": 1}',
        b'{"auction_id": "~expiry/1", "campaign": "x", "cost_micros": 1, "event_time_ms": 1}',
        b'{"campaign": "x", "cost_micros": 1, "event_time_ms": -5}',
    ],
)
def test_undecodable_impressions_raise_decode_error(raw: bytes | None) -> None:
    with pytest.raises(DecodeError):
        decode_impression(raw)


def test_copartition_mismatch_names_both_topics_and_counts() -> None:
    groups = [["impressions", "clicks"]]
    check_copartitioned(groups, {"impressions": 6, "clicks": 6})
    with pytest.raises(CopartitionError) as err:
        check_copartitioned(groups, {"impressions": 12, "clicks": 8})
    assert "impressions has 12 partitions" in str(err.value)
    assert "clicks has 8 partitions" in str(err.value)
    with pytest.raises(CopartitionError, match="do not exist: clicks"):
        check_copartitioned(groups, {"impressions": 12})


def test_topology_travels_through_the_environment() -> None:
    topo = Topology(app_id="x", prefix="run1-", partitions=4, processing_guarantee="exactly_once")
    assert Topology.from_env(topo.to_env()) == topo
    assert topo.impressions == "run1-impressions"
    assert topo.changelog("impressions") == "x-impressions-changelog"
    with pytest.raises(ValueError, match="ADCLICK_PARTITIONS"):
        Topology.from_env({"ADCLICK_PARTITIONS": "six"})
