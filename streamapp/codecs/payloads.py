"""Which serializer Faust's registry picks, and what it makes of a decoded payload.

Faust's ``Registry.loads_value`` / ``dumps_value`` pick the serializer among the call's, the
schema's and the app's (a value typed str or bytes with none anywhere is raw), and decoding
turns the codec's payload into the declared type: an int, float, Decimal, str or bytes, a
model's ``from_data``, or, with no declared type, the model a payload names by Faust's
"blessed key" (``{"__faust": {"ns": ...}}``, written by every ``faust.Record``), looked up in
Faust's model registry. `streamapp.codecs.resolved` makes the choice once per table or topic
rather than per record, so it needs both rules as functions of its own: `pick_serializer` and
`prepare_payload`. Both are written on Faust's public API (``faust.models.base.registry``,
``ModelT.from_data``, ``mode.utils.compat.want_str``) and give the values the registry's own
calls give (tests/unit/streamapp/codecs/test_resolved_codecs.py compares them).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from faust.models.base import registry as models
from mode.utils.compat import want_bytes, want_str

#: The key under which a serialized ``faust.Record`` names its model (Faust's wire format).
BLESSED_KEY = "__faust"


def pick_serializer(typ: Any, *candidates: Any) -> Any:
    """The first serializer given, else raw for a str or bytes type, else None."""
    for serializer in candidates:
        if serializer:
            return serializer
    if typ is str or typ is bytes:
        return "raw"
    return None


def named_model(payload: Any) -> Any:
    """``payload`` as the model it names by the blessed key, or as it is if it names none.

    Raises KeyError for a model name no loaded ``faust.Record`` has, as Faust's registry does.
    """
    if payload is None or isinstance(payload, bytes | str):
        return payload
    try:
        namespace = payload[BLESSED_KEY]["ns"]
    except (KeyError, TypeError):
        return payload
    return models[namespace].from_data(payload)


def prepare_payload(typ: Any, payload: Any) -> Any:
    """A decoded ``payload`` as a value of ``typ`` (None: the model it names, if any)."""
    if typ is None:
        return named_model(payload)
    if typ is int:
        return int(want_str(payload))
    if typ is float:
        return float(want_str(payload))
    if typ is Decimal:
        return Decimal(want_str(payload))
    if typ is str:
        return want_str(payload)
    if typ is bytes:
        return want_bytes(payload)
    return typ.from_data(payload, preferred_type=typ)
