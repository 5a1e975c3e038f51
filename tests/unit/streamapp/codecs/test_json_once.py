"""Faust's json codec without its per-call setup: the codec's bytes and values."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import faust
import pytest
from faust.serializers import codecs
from faust.serializers.registry import Registry
from hypothesis import given, settings
from hypothesis import strategies as st

from streamapp.codecs import json_once
from streamapp.codecs.payloads import prepare_payload

JSON = codecs.get_codec("json")
REGISTRY = Registry(key_serializer="json", value_serializer="json")
PREPARE = prepare_payload

scalars = st.one_of(
    st.text(),  # any code point, surrogates included
    st.integers(),
    st.floats(allow_nan=False),  # nan != nan: compared apart below
    st.booleans(),
    st.none(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=10,
)


class Point(faust.Record, serializer="json"):
    x: int
    y: int


def test_faust_json_codec_gets_the_fast_paths() -> None:
    assert json_once.dumps_for(JSON) is not None
    assert json_once.loads_for(JSON, None, PREPARE) is not None


@settings(max_examples=300, deadline=None)
@given(values)
def test_dumps_gives_the_codecs_bytes(value: Any) -> None:
    dumps = json_once.dumps_for(JSON)
    assert dumps is not None
    assert dumps(value) == JSON.dumps(value)


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("-inf"),
        uuid.UUID(int=7),
        datetime.datetime(2026, 11, 23, 12, 0, 0, 123456),
        {"p": Point(1, 2), "ids": (1, 2)},
        "\ud800 lone surrogate",
        True,
        1.0,
    ],
)
def test_dumps_gives_the_codecs_bytes_for_what_faust_adds(value: Any) -> None:
    # Faust's encoder default (UUID, datetime, models) and the values json spells apart.
    dumps = json_once.dumps_for(JSON)
    assert dumps is not None
    assert dumps(value) == JSON.dumps(value)


@settings(max_examples=300, deadline=None)
@given(values)
def test_loads_gives_the_registrys_values(value: Any) -> None:
    data = JSON.dumps(value)
    load = json_once.loads_for(JSON, None, PREPARE)
    assert load is not None
    loaded, expected = load(data), REGISTRY.loads_value(None, data, serializer="json")
    assert loaded == expected
    assert type(loaded) is type(expected)


@pytest.mark.parametrize(("typ", "value"), [(int, 42), (float, 2.5), (str, "s"), (Point, None)])
def test_loads_of_a_declared_type_is_prepared_as_faust_does(typ: Any, value: Any) -> None:
    data = JSON.dumps(Point(3, 4).to_representation() if typ is Point else value)
    load = json_once.loads_for(JSON, typ, PREPARE)
    assert load is not None
    loaded, expected = load(data), REGISTRY.loads_value(typ, data, serializer="json")
    assert loaded == expected
    assert type(loaded) is type(expected)


def test_a_blessed_model_without_a_declared_type_is_still_reconstructed() -> None:
    # A dict may name its model (Faust's ``__faust`` key): it still goes through the registry.
    data = JSON.dumps(Point(5, 6).to_representation())
    load = json_once.loads_for(JSON, None, PREPARE)
    assert load is not None
    assert load(data) == Point(5, 6)
    assert isinstance(load(data), Point)


def test_loads_raises_on_what_the_codec_cannot_read() -> None:
    load = json_once.loads_for(JSON, None, PREPARE)
    assert load is not None
    for data in (b"{not json", b"\xff\xfe"):
        with pytest.raises(ValueError):
            JSON.loads(data)
        with pytest.raises(ValueError):
            load(data)


def test_other_codecs_keep_their_own_calls() -> None:
    # A chained codec (json|binary) and a codec of another class are not the one known here.
    for codec in (codecs.get_codec("json|binary"), codecs.get_codec("raw")):
        assert json_once.dumps_for(codec) is None
        assert json_once.loads_for(codec, None, PREPARE) is None


def test_a_json_codec_that_encodes_otherwise_keeps_its_own_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As Faust's codec does with orjson installed: UTF-8 written out, not escaped.
    def unescaped(obj: Any, **kwargs: Any) -> str:
        import json

        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))

    monkeypatch.setattr(codecs._json, "dumps", unescaped)
    assert json_once.dumps_for(JSON) is None
    assert json_once.loads_for(JSON, None, PREPARE) is not None  # decoding agrees still

    def lossy(s: str, **kwargs: Any) -> Any:
        import json

        return json.loads(s, parse_int=float)

    monkeypatch.setattr(codecs._json, "loads", lossy)
    assert json_once.loads_for(JSON, None, PREPARE) is None
