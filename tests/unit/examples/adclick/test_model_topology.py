"""Wire format and topology checks: bad input gets one clear error, never a crash elsewhere."""

from __future__ import annotations

from typing import Any

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
from examples.adclick.topology import Topology
from streamapp import topic_check


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
    # The app declares its join through streamapp.joins; the worker's startup check refuses
    # mismatched or missing topics with one message naming each topic and its count.
    from examples.adclick.app import app, topology

    declared = topic_check.declared_topics(app)
    assert (topology.clicks, topology.impressions) in declared.copartitioned
    assert {"attribution-left", "attribution-right", "counters"} <= {
        t.table for t in declared.tables
    }
    counts = {t: n for t, n in topology.topic_partitions().items()}
    assert topic_check.find_problems(declared, {**counts, **topology.changelog_partitions()}) == []
    problems = topic_check.find_problems(
        declared, {**counts, topology.impressions: 12, topology.clicks: 8}
    )
    message = topic_check.describe_problems(problems, create_command="streamapp topics create")
    assert f"{topology.impressions} has 12 partitions" in message
    assert f"{topology.clicks} has 8 partitions" in message
    del counts[topology.clicks]
    missing = topic_check.describe_problems(
        topic_check.find_problems(declared, counts), create_command="streamapp topics create"
    )
    assert topology.clicks in missing


def test_topology_travels_through_the_environment() -> None:
    topo = Topology(app_id="x", prefix="run1-", partitions=4, processing_guarantee="exactly_once")
    assert Topology.from_env(topo.to_env()) == topo
    assert topo.impressions == "run1-impressions"
    assert topo.changelog("counters") == "x-counters-changelog"
    assert set(topo.changelog_partitions()) == {
        "x-attribution-left-changelog",
        "x-attribution-right-changelog",
        "x-counters-changelog",
        "x-campaign-stats-changelog",
    }
    with pytest.raises(ValueError, match="ADCLICK_PARTITIONS"):
        Topology.from_env({"ADCLICK_PARTITIONS": "six"})


async def test_an_impression_goes_on_to_its_campaign_as_it_came(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sent on as its source bytes (the aggregate counts it by key), not decoded and encoded."""
    from types import SimpleNamespace

    from examples.adclick import app as demo
    from streamapp.joins import Outcome, Side, SourceRecord

    sent: list[tuple[Any, Any, Any, Any]] = []

    async def send(message: Any, topic: Any, *, key: Any, value: Any) -> None:
        sent.append((message, topic, key, value))

    monkeypatch.setattr(demo.attribution, "send", send)
    # Spaced as the model's encoding never writes it: an encoding again would differ.
    raw = b'{"auction_id": "a1", "campaign": "c7", "cost_micros": 5, "event_time_ms": 10}'
    message = SimpleNamespace(value=raw)
    impression = decode_impression(raw)
    await demo._on_record(
        SourceRecord(Side.RIGHT, "a1", impression, 10, 0, Outcome.ACCEPTED, message)
    )
    assert sent == [(message, demo.campaign_impressions_topic, b"c7", raw)]
