"""The demo's records and their wire format (JSON, UTF-8), independent of Faust and Spark.

Times are integer epoch milliseconds and money is integer micros, so that the
streaming join, the Spark reference join and the reconciliation compare exact
values and never disagree about a rounding.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

# Auction ids starting with this prefix are refused as undecodable: the demo's wire format
# reserved them for table bookkeeping keys, and keeps refusing them so that what goes to the
# dead-letter topic does not depend on how the join stores its state.
RESERVED_KEY_PREFIX = "~"


class DecodeError(ValueError):
    """A record that cannot be read as the type its topic carries."""


@dataclass(frozen=True)
class Impression:
    auction_id: str
    campaign: str
    cost_micros: int  # price of one click on this impression
    event_time_ms: int


@dataclass(frozen=True)
class Click:
    click_id: str
    auction_id: str
    event_time_ms: int


@dataclass(frozen=True)
class Attribution:
    """One click attributed to its impression: the join's output record."""

    click_id: str
    auction_id: str
    campaign: str
    cost_micros: int
    impression_time_ms: int
    click_time_ms: int

    @classmethod
    def of(cls, impression: Impression, click: Click) -> Attribution:
        return cls(
            click_id=click.click_id,
            auction_id=impression.auction_id,
            campaign=impression.campaign,
            cost_micros=impression.cost_micros,
            impression_time_ms=impression.event_time_ms,
            click_time_ms=click.event_time_ms,
        )


def encode(record: Impression | Click | Attribution) -> bytes:
    return json.dumps(asdict(record), separators=(",", ":"), sort_keys=True).encode()


def _load_object(raw: bytes | None) -> dict[str, Any]:
    if raw is None:
        raise DecodeError("record has no value")
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DecodeError(f"not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise DecodeError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _str_field(obj: dict[str, Any], name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value:
        raise DecodeError(f"field {name!r} must be a non-empty string, got {value!r}")
    return value


def _int_field(obj: dict[str, Any], name: str) -> int:
    value = obj.get(name)
    # bool is an int subclass in Python; a flag is never a time or an amount.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise DecodeError(f"field {name!r} must be a non-negative integer, got {value!r}")
    return value


def _auction_id(obj: dict[str, Any]) -> str:
    auction_id = _str_field(obj, "auction_id")
    if auction_id.startswith(RESERVED_KEY_PREFIX):
        raise DecodeError(f"auction_id may not start with {RESERVED_KEY_PREFIX!r}")
    return auction_id


def decode_impression(raw: bytes | None) -> Impression:
    obj = _load_object(raw)
    return Impression(
        auction_id=_auction_id(obj),
        campaign=_str_field(obj, "campaign"),
        cost_micros=_int_field(obj, "cost_micros"),
        event_time_ms=_int_field(obj, "event_time_ms"),
    )


def decode_click(raw: bytes | None) -> Click:
    obj = _load_object(raw)
    return Click(
        click_id=_str_field(obj, "click_id"),
        auction_id=_auction_id(obj),
        event_time_ms=_int_field(obj, "event_time_ms"),
    )


def decode_attribution(raw: bytes | None) -> Attribution:
    obj = _load_object(raw)
    return Attribution(
        click_id=_str_field(obj, "click_id"),
        auction_id=_auction_id(obj),
        campaign=_str_field(obj, "campaign"),
        cost_micros=_int_field(obj, "cost_micros"),
        impression_time_ms=_int_field(obj, "impression_time_ms"),
        click_time_ms=_int_field(obj, "click_time_ms"),
    )
