"""What an agent sends to a topic, encoded with the topic's codecs looked up once.

``Topic.send`` (and ``send_soon``, ``Agent.send``, the records of ``stream_publish_on_commit``)
encode the key and the value through ``Topic.prepare_key`` / ``prepare_value``: the topic's
``Schema.dumps_key`` / ``dumps_value``, the app's serializer registry (which picks the
serializer among the call's, the schema's and the app's, and checks for a model), the codec
looked up by name, and Faust's json codec, which builds a new JSON encoder on every call. For
the throughput benchmark's output records that was about a third of what a send costs on the
event-loop thread (docs/performance.md). Table writes and a batch topic's records already take
the codecs resolved once (`streamapp.codecs.resolved`); this `Topic` does the
same for sends: per topic, one resolved encoder per key or value, serializer argument and
registry, made at the first send.

The bytes are the registry's: a str, number, dict, list or tuple goes to the codec the
registry would pick (Faust's json codec without its per-call setup,
`streamapp.codecs.json_once`); anything else (bytes, a model, None, a subclass of str)
takes Faust's whole path, as before. Headers are the caller's, as Faust's
``Schema.on_dumps_*_prepare_headers`` return them. Faust's own path is kept whole for a schema
that is not Faust's own class (a subclass may encode or add headers otherwise), a schema given
to one call (``send(schema=...)``), a registry that is not Faust's own class, and serializer
arguments beyond the first few per topic (the resolved encoders are kept, not made per call).
A codec registered under a name after a topic's first send under that name is not seen by
that topic, as for tables (`streamapp.codecs.resolved`).

No private Faust name is used here (``prepare_key`` and ``prepare_value`` are Faust's public
hooks for a topic's serialization); `streamapp.codecs.payloads` has the registry's rules.
Delete when Faust's topics cache their codecs.
Tests: tests/unit/streamapp/codecs/test_topic_codecs.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import faust
from faust.serializers.schemas import Schema
from faust.types import CodecArg, K, SchemaT, V
from faust.types.core import OpenHeadersArg

from streamapp.codecs import resolved as resolved_codecs

Dumper = Callable[[Any], bytes | None]

#: Resolved encoders kept per topic and side: a few serializer arguments, never one per call.
MAX_RESOLVED = 8


class Topic(faust.Topic):
    """Faust's topic, encoding what is sent to it with codecs looked up once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.streamapp_key_dumpers: dict[tuple[Any, ...], Dumper | None] = {}
        self.streamapp_value_dumpers: dict[tuple[Any, ...], Dumper | None] = {}

    def prepare_key(
        self,
        key: K,
        key_serializer: CodecArg,
        schema: SchemaT[Any, Any] | None = None,
        headers: OpenHeadersArg = None,
    ) -> tuple[Any, OpenHeadersArg]:
        dump = self._plain_dumper("key", key, key_serializer, schema)
        if dump is not None:
            return dump(key), headers
        return super().prepare_key(key, key_serializer, schema, headers)

    def prepare_value(
        self,
        value: V,
        value_serializer: CodecArg,
        schema: SchemaT[Any, Any] | None = None,
        headers: OpenHeadersArg = None,
    ) -> tuple[Any, OpenHeadersArg]:
        dump = self._plain_dumper("value", value, value_serializer, schema)
        if dump is not None:
            return dump(value), headers
        return super().prepare_value(value, value_serializer, schema, headers)

    def _plain_dumper(
        self,
        which: resolved_codecs.Which,
        obj: Any,
        serializer: CodecArg,
        schema: SchemaT[Any, Any] | None,
    ) -> Dumper | None:
        """The resolved encoder for ``obj``, or None where Faust's path is kept: anything but
        a plain object (bytes, a model, None) goes the registry's way anyway, and so does a
        schema given to this one send."""
        if type(obj) not in resolved_codecs.PLAIN or (
            schema is not None and schema is not self.schema
        ):
            return None
        return self._dumper(which, serializer)

    def _dumper(self, which: resolved_codecs.Which, serializer: CodecArg) -> Dumper | None:
        """The resolved encoder ``Schema.dumps_<which>`` amounts to for this topic's schema and
        ``serializer``, or None where Faust's path is kept."""
        schema = self.schema
        if type(schema) is not Schema:
            return None
        registry = self.app.serializers
        if which == "key":
            typ, chosen = schema.key_type, serializer or schema.key_serializer
            dumpers, default = self.streamapp_key_dumpers, registry.key_serializer
        else:
            typ, chosen = schema.value_type, serializer or schema.value_serializer
            dumpers, default = self.streamapp_value_dumpers, registry.value_serializer
        # Everything the registry's choice of codec depends on (the schema can be updated).
        cache_key = (typ, chosen, registry, default)
        try:
            return dumpers[cache_key]
        except KeyError:
            pass
        except TypeError:  # an unhashable type or serializer: Faust's path
            return None
        if len(dumpers) >= MAX_RESOLVED:
            return None
        dump = resolved_codecs.dumper(registry, which, typ, chosen)
        dumpers[cache_key] = dump
        return dump
