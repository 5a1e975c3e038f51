"""Codecs looked up once give the same bytes and values as Faust's registry."""

from __future__ import annotations

from typing import Any

import faust
import pytest
from faust.exceptions import KeyDecodeError, ValueDecodeError
from faust.serializers.registry import Registry

from streamapp.codecs import resolved as resolved_codecs


class Point(faust.Record, serializer="json"):
    x: int
    y: int


REGISTRY = Registry(key_serializer="json", value_serializer="json")

# (type, serializer given, objects) for each side.
CASES: list[tuple[Any, Any, list[Any]]] = [
    (None, None, ["k1", 7, 2.5, {"a": [1, 2]}, [1, "x"], True]),
    (str, None, ["k1", "ünïcode"]),
    (bytes, None, [b"\x00\xffraw"]),
    (int, "json", [0, 12345]),
    (str, "raw", ["plain"]),
    (None, "raw", [b"bytes"]),
    (Point, None, [Point(1, 2)]),
    (None, "json", [b"already bytes", Point(3, 4)]),
]


@pytest.mark.parametrize("which", ["key", "value"])
@pytest.mark.parametrize(("typ", "serializer", "objects"), CASES)
def test_dumps_as_the_registry(which: str, typ: Any, serializer: Any, objects: list[Any]) -> None:
    dump = resolved_codecs.dumper(REGISTRY, which, typ, serializer)  # type: ignore[arg-type]
    registry_dumps = REGISTRY.dumps_key if which == "key" else REGISTRY.dumps_value
    assert dump is not None
    for obj in objects:
        assert dump(obj) == registry_dumps(typ, obj, serializer=serializer)


@pytest.mark.parametrize("which", ["key", "value"])
@pytest.mark.parametrize(("typ", "serializer", "objects"), CASES)
def test_loads_as_the_registry(which: str, typ: Any, serializer: Any, objects: list[Any]) -> None:
    load = resolved_codecs.loader(REGISTRY, which, typ, serializer)  # type: ignore[arg-type]
    registry_dumps = REGISTRY.dumps_key if which == "key" else REGISTRY.dumps_value
    registry_loads = REGISTRY.loads_key if which == "key" else REGISTRY.loads_value
    assert load is not None
    for obj in objects:
        data = registry_dumps(typ, obj, serializer=serializer)
        assert data is not None
        try:
            expected = registry_loads(typ, data, serializer=serializer)
        except (KeyDecodeError, ValueDecodeError):
            # Faust cannot read it back either (bytes given to a json key): neither can this.
            with pytest.raises(ValueError):
                load(data)
            continue
        loaded = load(data)
        assert loaded == expected
        assert type(loaded) is type(expected)


def test_value_serializer_for_str_and_bytes_without_one_is_raw() -> None:
    # The registry's pick: a value typed str or bytes with no serializer anywhere is raw.
    registry = Registry(key_serializer=None, value_serializer=None)
    for typ, obj, data in ((str, "text", b"text"), (bytes, b"data", b"data")):
        dump = resolved_codecs.dumper(registry, "value", typ, None)
        load = resolved_codecs.loader(registry, "value", typ, None)
        assert dump is not None and load is not None
        assert dump(obj) == registry.dumps_value(typ, obj) == data
        assert load(data) == registry.loads_value(typ, data) == obj


def test_a_bad_payload_raises() -> None:
    # The callers fall back to the registry on any error, which raises Faust's own.
    load = resolved_codecs.loader(REGISTRY, "value", int, "json")
    assert load is not None
    with pytest.raises(ValueError):
        load(b"not json")
    with pytest.raises(ValueDecodeError):
        REGISTRY.loads_value(int, b"not json", serializer="json")


def test_a_registry_of_another_class_keeps_its_calls() -> None:
    class Custom(Registry):
        pass

    custom = Custom()
    assert resolved_codecs.dumper(custom, "key", str, None) is None
    assert resolved_codecs.loader(custom, "value", None, "json") is None
