"""streamapp's own copy of the registry's rules gives what Faust's registry gives."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import faust
import pytest
from faust.exceptions import ValueDecodeError
from faust.serializers.registry import Registry

from streamapp.codecs.payloads import named_model, pick_serializer, prepare_payload


class Visit(faust.Record, serializer="json"):
    page: str
    seconds: float


class Pageview(faust.Record, serializer="json", namespace="payloads-test.Pageview"):
    url: str


REGISTRY = Registry(key_serializer="json", value_serializer="json")
NO_DEFAULTS = Registry(key_serializer=None, value_serializer=None)


@pytest.mark.parametrize(
    ("typ", "value"),
    [
        (None, {"plain": [1, 2]}),
        (None, "text"),
        (None, 12),
        (None, None),
        (None, Visit("home", 1.5)),
        (None, Pageview("/a")),
        (int, 7),
        (float, 2.25),
        (Decimal, "1.10"),
        (str, "s"),
        (Visit, Visit("cart", 0.5)),
        (Pageview, Pageview("/b")),
    ],
)
def test_a_payload_is_prepared_as_the_registry_prepares_it(typ: Any, value: Any) -> None:
    data = REGISTRY.dumps_value(typ, value, serializer="json")
    assert data is not None
    expected = REGISTRY.loads_value(typ, data, serializer="json")
    ours = prepare_payload(typ, faust.serializers.codecs.loads("json", data))
    assert ours == expected
    assert type(ours) is type(expected)


def test_bytes_and_str_types_are_prepared_from_raw_payloads() -> None:
    for typ, data in ((str, b"text"), (bytes, b"\x00\xff")):
        expected = NO_DEFAULTS.loads_value(typ, data)
        ours = prepare_payload(typ, data)
        assert ours == expected
        assert type(ours) is type(expected)


def test_a_payload_naming_an_unknown_model_is_refused_as_faust_refuses_it() -> None:
    payload = {"__faust": {"ns": "payloads-test.NoSuchModel"}, "url": "/c"}
    data = faust.serializers.codecs.dumps("json", payload)
    with pytest.raises(ValueDecodeError):
        REGISTRY.loads_value(None, data, serializer="json")
    with pytest.raises(KeyError):
        named_model(payload)


def test_a_payload_with_a_blessed_key_of_another_shape_is_left_as_it_is() -> None:
    for payload in ({"__faust": "not a mapping"}, {"__faust": {}}, ["__faust"], b"raw"):
        assert named_model(payload) is payload


@pytest.mark.parametrize(
    ("typ", "candidates", "value", "expected"),
    [
        (None, ("json", "raw"), {"a": 1}, "json"),
        (None, (None, "binary"), "x", "binary"),
        (str, (None, None), "x", "raw"),
        (bytes, (None, None), b"x", "raw"),
        (int, (None, None), 1, None),
        (str, ("", "json"), "x", "json"),
    ],
)
def test_the_serializer_is_picked_as_the_registry_picks_it(
    typ: Any, candidates: tuple[Any, ...], value: Any, expected: Any
) -> None:
    assert pick_serializer(typ, *candidates) == expected
    if expected is not None:
        # The registry's own choice, seen through what it writes for the value.
        registry = Registry(key_serializer=None, value_serializer=candidates[1])
        written = registry.dumps_value(typ, value, serializer=candidates[0])
        assert written == faust.serializers.codecs.dumps(expected, value)
