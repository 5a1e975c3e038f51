"""Faust's ``json`` codec without its per-call setup, the same bytes and values.

Faust's ``json`` codec encodes with ``json.dumps(obj, cls=faust.utils.json.JSONEncoder,
separators=(",", ":"))`` behind two layers of codec calls: the standard library builds a new
encoder (and its C encoder) on every call when a ``cls`` is given, about two thirds of the
cost of encoding a table key or a small value. Decoding, Faust's registry then asks its model
registry whether the value names a model (`streamapp.codecs.payloads`), which for a number
raises and catches a ``TypeError``. A batch agent's table pays this per record: the key and
the value encoded for each write, the value decoded for each read (docs/performance.md).

`dumps_for` gives a function encoding with one encoder built once with the same options, so
the same bytes, Faust's ``default`` included (UUIDs, datetimes, models in containers); a str
or an int goes straight to what the encoder would write for it. `loads_for` decodes as the
codec does and, for a value with no declared type, returns a str, number, bool or None as it
is: no model can be named by one. Both apply only to Faust's own ``json`` codec with no
codecs chained to it, and only if, as the codec is resolved, they agree with it on a few
probe values (Faust encodes with orjson instead when it is installed, whose output differs:
then the codec's own calls are kept). Errors are the standard library's, as the codec's.

No private Faust name is used: ``faust.serializers.codecs.json`` and
``faust.utils.json.JSONEncoder`` are public. Delete when Faust's json codec keeps its encoder.
Tests: tests/unit/streamapp/codecs/test_json_once.py, test_resolved_codecs.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any

from faust.serializers import codecs as faust_codecs
from faust.utils.json import JSONEncoder

#: What ``faust.utils.json.dumps`` passes to the standard library's ``json.dumps``.
_ENCODER = JSONEncoder(separators=(",", ":"))

#: Values a json payload with no declared type comes back as, which no model can be named by.
_NOT_MODELS = frozenset({str, int, float, bool, type(None)})

#: Values the fast paths must encode and decode as the codec does, checked as it is resolved.
_PROBES: tuple[Any, ...] = (
    "k1",
    'ünï\u2028\x00"\\/',
    0,
    -12345,
    10**30,
    2.5,
    -0.0,
    1e300,
    math.inf,
    True,
    False,
    None,
    {"a": [1, 2.5, "x"], "b": None},
    [1, {"c": True}],
)


def _is_faust_json(codec: Any) -> bool:
    return type(codec) is faust_codecs.json and not codec.children


def _dumps(obj: Any) -> bytes:
    cls = type(obj)
    if cls is str:
        # The encoder's own path for a str (ensure_ascii): ASCII only, so encoding is exact.
        text: str = encode_basestring_ascii(obj)
        return text.encode()
    if cls is int:
        return int.__repr__(obj).encode()  # what the encoder writes for an int
    encoded: str = _ENCODER.encode(obj)
    return encoded.encode()


def _loads(data: bytes) -> Any:
    # The codec's: ``json.loads(want_str(data))``; want_str decodes bytes as UTF-8.
    return json.loads(data.decode() if type(data) is bytes else data)


def dumps_for(codec: Any) -> Callable[[Any], bytes] | None:
    """``codec.dumps`` without its per-call setup, or None when ``codec`` is not Faust's json
    codec as it is known to encode."""
    if not _is_faust_json(codec):
        return None
    try:
        if any(_dumps(probe) != codec.dumps(probe) for probe in _PROBES):
            return None
    except Exception:  # a codec that cannot encode a probe is not the one this knows
        return None
    return _dumps


def loads_for(
    codec: Any, typ: Any, prepare: Callable[[Any, Any], Any]
) -> Callable[[bytes], Any] | None:
    """``prepare(typ, codec.loads(data))`` (the registry's decoding) without the codec's
    layers, and without ``prepare`` for a value of no declared type that cannot name a model;
    None when ``codec`` is not Faust's json codec as it is known to decode."""
    if not _is_faust_json(codec):
        return None
    try:
        for probe in _PROBES:
            data = codec.dumps(probe)
            ours, theirs = _loads(data), codec.loads(data)
            if ours != theirs or type(ours) is not type(theirs):
                return None
    except Exception:
        return None
    if typ is not None:
        return lambda data: prepare(typ, _loads(data))

    def load(data: bytes) -> Any:
        value = _loads(data)
        if type(value) in _NOT_MODELS:
            return value
        return prepare(None, value)

    return load
