"""Faust's serializer registry with the codec looked up once, not per key or value.

Each ``Registry.loads_key`` / ``loads_value`` / ``dumps_key`` / ``dumps_value`` call picks the
serializer among its arguments and the app's defaults, looks the codec up by name
(``codecs.get_codec``) and, decoding, prepares the payload for the type: per record of a batch
agent, five such calls read Faust's settings and the codec registry again
(docs/performance.md). For one channel or one table the choice never changes, so these
functions make it once and return a function doing only the codec's work, the same bytes and
values as the registry's call:

- ``loads`` (`loader`): the payload ``codec.loads(data)`` made a value of the type as the
  registry makes it (`payloads.prepare_payload`), with the codec of the serializer the
  registry's ``loads_key`` (the given serializer or the registry's key serializer) or
  ``loads_value`` (`payloads.pick_serializer`) would pick;
- ``dumps`` (`dumper`): ``codec.dumps(obj)`` for an object the registry would give to that
  codec as it is: a str, number, dict, list or tuple (not a model, not bytes); anything else
  goes to the registry's call itself (models pick their own serializer, bytes pass as they
  are).

Faust's ``json`` codec is called without its per-call setup (`streamapp.codecs.json_once`,
the same bytes and values).

A registry that is not Faust's own class gets None (its methods may do otherwise): the caller
keeps the registry's calls. Errors are the codec's own (the registry would wrap them in a
``KeyDecodeError`` / ``ValueDecodeError``): the callers fall back to the registry's call on
any error, which raises what Faust raises.

No private Faust name is used: the registry's two rules are `streamapp.codecs.payloads`'.
Delete when Faust's registry caches its codecs per type and serializer.
Tests: tests/unit/streamapp/codecs/test_resolved_codecs.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from faust.serializers.codecs import get_codec
from faust.serializers.registry import Registry

from streamapp.codecs import json_once
from streamapp.codecs.payloads import pick_serializer, prepare_payload

Which = Literal["key", "value"]

#: Types of objects the registry gives to the codec as they are (neither bytes nor a model).
PLAIN = frozenset({str, int, float, bool, dict, list, tuple})


def _loads_serializer(registry: Registry, which: Which, typ: Any, serializer: Any) -> Any:
    """The serializer the registry's call for ``which`` would use."""
    if which == "key":
        # Registry.loads_key: ``serializer or self.key_serializer``.
        return serializer or registry.key_serializer
    return pick_serializer(typ, serializer, registry.value_serializer)


def loader(registry: Any, which: Which, typ: Any, serializer: Any) -> Callable[[bytes], Any] | None:
    """``registry.loads_<which>(typ, data, serializer=serializer)`` for data that is not None,
    with the codec looked up now; None for a registry that is not Faust's own class."""
    if type(registry) is not Registry:
        return None
    name = _loads_serializer(registry, which, typ, serializer)
    prepare = prepare_payload
    if not name:
        return lambda data: prepare(typ, data)
    codec = get_codec(name)
    fast = json_once.loads_for(codec, typ, prepare)
    if fast is not None:
        return fast
    loads = codec.loads
    return lambda data: prepare(typ, loads(data))


def dumper(
    registry: Any, which: Which, typ: Any, serializer: Any
) -> Callable[[Any], bytes | None] | None:
    """``registry.dumps_<which>(typ, obj, serializer=serializer)`` with the codec looked up
    now for the objects that go to it; None for a registry that is not Faust's own class."""
    if type(registry) is not Registry:
        return None
    # dumps_key and dumps_value pick the serializer alike.
    default = registry.key_serializer if which == "key" else registry.value_serializer
    name = pick_serializer(typ, serializer, default)
    registry_dumps = registry.dumps_key if which == "key" else registry.dumps_value
    if not name:
        return lambda obj: registry_dumps(typ, obj, serializer=serializer)
    codec = get_codec(name)
    dumps = json_once.dumps_for(codec) or codec.dumps

    def dump(obj: Any) -> bytes | None:
        if type(obj) in PLAIN:
            return dumps(obj)
        return registry_dumps(typ, obj, serializer=serializer)

    return dump
