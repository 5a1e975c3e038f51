"""Deterministic synthetic ad traffic: which records, in which arrival order (no I/O).

Given the same config (seed included), the same records come out in the same
order with the same event-time offsets; only the base time is chosen at run
time (or fixed with ``base_time_ms``). The generator also reports the truth it
built in (how many clicks fall in the window, how many late, orphaned, early),
so a run can be checked against what was meant, not only against Spark.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from examples.adclick.model import (
    Click,
    DecodeError,
    Impression,
    decode_click,
    decode_impression,
    encode,
)

IMPRESSIONS = "impressions"
CLICKS = "clicks"


@dataclass(frozen=True)
class TrafficConfig:
    events: int  # records to produce, impressions + clicks + undecodable ones
    seed: int = 7
    rate: float = 500.0  # records per second of event time (and of wall time when paced)
    late_fraction: float = 0.05  # of clicks: after the window closes
    orphan_fraction: float = 0.02  # of clicks: for an auction that has no impression
    early_arrival_fraction: float = 0.1  # of clicks: arrive before their impression
    bad_fraction: float = 0.002  # of records: undecodable, for the dead-letter path
    click_through: float = 0.3  # chance an auction gets a click
    double_click: float = 0.05  # chance a clicked auction gets a second, distinct click
    campaigns: int = 8
    window_ms: int = 10_000
    grace_ms: int = 2_000
    base_time_ms: int = 0

    def __post_init__(self) -> None:
        if self.events < 0 or self.rate <= 0:
            raise ValueError("events must be >= 0 and rate > 0")
        for name in ("late_fraction", "orphan_fraction", "early_arrival_fraction", "bad_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")


@dataclass(frozen=True)
class PlannedRecord:
    arrival_ms: int  # offset from the start: when it should be produced
    topic: str  # IMPRESSIONS or CLICKS (logical; the app maps it to real topic names)
    key: bytes
    value: bytes


@dataclass
class Truth:
    impressions: int = 0
    clicks: int = 0
    in_window_clicks: int = 0  # the join must attribute exactly these
    late_clicks: int = 0
    orphan_clicks: int = 0
    early_arrivals: int = 0  # in-window clicks that arrive before their impression
    undecodable: int = 0
    per_campaign_clicks: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return dict(vars(self))


def campaign_name(i: int) -> str:
    return f"campaign-{i:02d}"


def plan_traffic(cfg: TrafficConfig) -> tuple[list[PlannedRecord], Truth]:
    """All records of a run, sorted by arrival, and the truth about them."""
    rng = random.Random(cfg.seed)
    records: list[PlannedRecord] = []
    # Records per auction, on average, to turn the record rate into an auction rate.
    per_auction = 1.0 + cfg.click_through * (1.0 + cfg.double_click) + cfg.orphan_fraction
    auction_gap_ms = 1000.0 * per_auction / cfg.rate
    disorder = max(2, cfg.grace_ms // 2)  # within grace, with room to spare
    auction = 0

    def emit(arrival: float, topic: str, key: str, value: bytes) -> None:
        records.append(PlannedRecord(int(arrival), topic, key.encode(), value))

    # Generate past the point where ``events`` records have arrived, by the longest a
    # click can trail its impression, so the kept prefix has the steady mix of the rate.
    horizon_ms = 1000.0 * cfg.events / cfg.rate + cfg.window_ms + cfg.grace_ms
    while len(records) < cfg.events or auction * auction_gap_ms < horizon_ms:
        start = auction * auction_gap_ms
        auction_id = f"a{cfg.seed}-{auction:08d}"
        imp = Impression(
            auction_id=auction_id,
            campaign=campaign_name(rng.randrange(cfg.campaigns)),
            cost_micros=rng.randrange(50_000, 2_000_000, 10_000),
            event_time_ms=cfg.base_time_ms + int(start),
        )
        imp_arrival = start
        n_clicks = 0
        if rng.random() < cfg.click_through:
            n_clicks = 2 if rng.random() < cfg.double_click else 1
        for c in range(n_clicks):
            if rng.random() < cfg.late_fraction:
                # Late by less than grace, so the impression is still held when the
                # click comes and the join can tell "late" from "unmatched".
                delay = cfg.window_ms + 1 + rng.randrange(disorder)
            elif rng.random() < cfg.early_arrival_fraction:
                delay = rng.randrange(disorder // 2)
                # Hold the impression back past its click, within the disorder bound.
                imp_arrival = max(imp_arrival, start + delay + 1 + rng.randrange(disorder // 2))
            else:
                delay = rng.randrange(cfg.window_ms + 1)
            click = Click(f"c{cfg.seed}-{auction:08d}-{c}", auction_id, imp.event_time_ms + delay)
            emit(start + delay, CLICKS, auction_id, encode(click))
        emit(imp_arrival, IMPRESSIONS, auction_id, encode(imp))
        if rng.random() < cfg.orphan_fraction:
            orphan_auction = f"o{cfg.seed}-{auction:08d}"
            delay = rng.randrange(cfg.window_ms)
            click = Click(f"c{cfg.seed}-{auction:08d}-o", orphan_auction, imp.event_time_ms + delay)
            emit(start + delay, CLICKS, orphan_auction, encode(click))
        if rng.random() < cfg.bad_fraction:
            topic = IMPRESSIONS if rng.random() < 0.5 else CLICKS
            emit(start, topic, auction_id, b"\xff not json {" + str(auction).encode())
        auction += 1
    # Python's sort is stable: records with the same arrival keep generation order.
    records.sort(key=lambda r: r.arrival_ms)
    # Whole auctions were generated; keep exactly the count asked for. The truth is
    # computed from the records kept, by the join rule, so trimming cannot skew it.
    records = records[: cfg.events]
    return records, truth_of(records, cfg.window_ms)


def truth_of(records: list[PlannedRecord], window_ms: int) -> Truth:
    """What the join must make of exactly these records."""
    truth = Truth()
    impressions: dict[str, tuple[int, Impression]] = {}
    clicks: list[tuple[int, Click]] = []
    for r in records:
        try:
            if r.topic == IMPRESSIONS:
                imp = decode_impression(r.value)
                impressions.setdefault(imp.auction_id, (r.arrival_ms, imp))
                truth.impressions += 1
            else:
                clicks.append((r.arrival_ms, decode_click(r.value)))
                truth.clicks += 1
        except DecodeError:
            truth.undecodable += 1
    for arrival, click in clicks:
        found = impressions.get(click.auction_id)
        if found is None:
            truth.orphan_clicks += 1
            continue
        imp_arrival, imp = found
        if click.event_time_ms > imp.event_time_ms + window_ms:
            truth.late_clicks += 1
        elif click.event_time_ms >= imp.event_time_ms:
            truth.in_window_clicks += 1
            c = imp.campaign
            truth.per_campaign_clicks[c] = truth.per_campaign_clicks.get(c, 0) + 1
            if arrival < imp_arrival:
                truth.early_arrivals += 1
    return truth


def iter_records(cfg: TrafficConfig) -> Iterator[PlannedRecord]:
    records, _ = plan_traffic(cfg)
    yield from records
