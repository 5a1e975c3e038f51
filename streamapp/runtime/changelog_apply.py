"""Changelog records a replay applies to a table's store as the bytes they came as.

A table's replay (an active's recovery, a standby, a warmup) applied each changelog record
through Faust: the changelog topic's decode (the key and the value decoded into objects, a
Faust event made), the table's ``apply_changelog_batch`` (which hands the events to the store),
and ``on_changelog_event`` awaited per event. streamapp's RocksDB store writes each record's key
and value bytes as they came (`streamapp.runtime.stores.RocksDBStore.apply_changelog_batch`): the
decoded objects are thrown away. For a table where nothing else looks at them,
`RawChangelog.apply` hands the store the records themselves.

A record must still be one the table can decode: one that cannot meets the bad-record handling
of a changelog record (`streamapp.changelog_records`: a warning, counted, not stored). So each
key and value is checked with the codec the changelog topic decodes it with, looked up once
(`streamapp.codecs.resolved`: the registry's codec and payload preparation, the
same values and errors), the objects left unmade; a batch with any record that does not pass
(or a key that is None) takes Faust's path whole, which handles it as before.

Taken only where it is provably the same result (`RawChangelog.for_table`, decided once per
table):

- the table's store is streamapp's RocksDB store, its ``apply_changelog_batch`` not overridden;
- the table's ``apply_changelog_batch`` and ``on_changelog_event`` are Faust's, under
  streamapp's skipping of undecodable records (`SkipsUndecodableChangelogRecords`): a plain
  ``Table`` (windowed too: its expiry heap is rebuilt from the store after the replay) or a
  ``GlobalTable`` of a `streamapp.App`; not a ``SetTable`` (its records are operations,
  `streamapp.set_tables`), nor any table class that overrides either;
- no ``on_changelog_event`` callback was given to the table (it takes the decoded events);
- the changelog topic decodes with Faust's own schema and serializer registry, through
  streamapp's topic (`streamapp.bad_records.Topic`, the App's ``Topic`` setting).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import ConsumerRecord
from faust.serializers.schemas import Schema
from faust.tables.base import Collection
from faust.types import TP
from faust.types.models import ModelT
from faust.types.tuples import ConsumerMessage

from streamapp.changelog_records import SkipsUndecodableChangelogRecords
from streamapp.codecs import resolved as resolved_codecs
from streamapp.runtime.messages import consumer_message
from streamapp.runtime.stores import RocksDBStore

#: Where `RawChangelog.of` keeps a table's decision, on the table.
_KEPT_AS = "_streamapp_raw_changelog"


class _Record:
    """A changelog record as the store's ``apply_changelog_batch`` reads it (``.message``)."""

    __slots__ = ("message",)

    def __init__(self, message: ConsumerMessage) -> None:
        self.message = message


def _defined_by(cls: type, name: str, below: type) -> type | None:
    """The class of ``cls``'s MRO after ``below`` that defines ``name``."""
    mro = cls.__mro__
    for klass in mro[mro.index(below) + 1 :]:
        if name in vars(klass):
            return klass
    return None


def _is_model(typ: Any) -> bool:
    return isinstance(typ, type) and issubclass(typ, ModelT)


class RawChangelog:
    """How one table's changelog records are checked and applied as bytes (see the module)."""

    __slots__ = ("load_key", "load_value", "none_value_ok", "store")

    def __init__(
        self,
        store: RocksDBStore,
        load_key: Callable[[bytes], Any],
        load_value: Callable[[bytes], Any],
        none_value_ok: bool,
    ) -> None:
        self.store = store
        self.load_key = load_key
        self.load_value = load_value
        #: Whether a record without a value (a deletion) decodes (Faust's ``allow_empty``, or a
        #: value type that is not a model).
        self.none_value_ok = none_value_ok

    @classmethod
    def for_table(cls, table: Any) -> RawChangelog | None:
        """The table's raw path, or None where it is not provably Faust's result."""
        from streamapp.bad_records import Topic  # it imports the changelog records module

        store = table.data
        if not isinstance(store, RocksDBStore) or (
            type(store).apply_changelog_batch is not RocksDBStore.apply_changelog_batch
        ):
            return None
        table_cls = type(table)
        mixin = SkipsUndecodableChangelogRecords
        if not issubclass(table_cls, mixin):
            return None
        for name in ("apply_changelog_batch", "on_changelog_event"):
            if getattr(table_cls, name) is not getattr(mixin, name):
                return None
            if _defined_by(table_cls, name, mixin) is not Collection:
                return None
        if table.info()["on_changelog_event"] is not None:
            return None
        topic = table.changelog_topic
        schema = topic.schema
        if type(topic) is not Topic or type(schema) is not Schema:
            return None
        registry = table.app.serializers
        load_key = resolved_codecs.loader(registry, "key", schema.key_type, schema.key_serializer)
        load_value = resolved_codecs.loader(
            registry, "value", schema.value_type, schema.value_serializer
        )
        if load_key is None or load_value is None:
            return None
        value_type = schema.value_type
        if value_type is not None and not isinstance(value_type, type):
            return None  # Faust's check of a missing value against a model would not be ours
        none_value_ok = bool(schema.allow_empty) or not _is_model(value_type)
        return cls(store, load_key, load_value, none_value_ok)

    @classmethod
    def of(cls, table: Any) -> RawChangelog | None:
        """`for_table`, decided at the table's first replayed batch and kept with the table."""
        try:
            found: RawChangelog | None = table.__dict__[_KEPT_AS]
        except KeyError:
            found = cls.for_table(table)
            table.__dict__[_KEPT_AS] = found
        return found

    def apply(self, tp: TP, records: Sequence[ConsumerRecord[Any, Any]]) -> bool:
        """Store ``records`` as their bytes, if each decodes; False (nothing stored) if one
        does not, or has no key: the caller takes Faust's path for the batch."""
        load_key, load_value, none_value_ok = self.load_key, self.load_value, self.none_value_ok
        for record in records:
            key, value = record.key, record.value
            if key is None:
                return False
            try:
                load_key(key)
                if value is not None:
                    load_value(value)
                elif not none_value_ok:
                    return False
            except Exception:
                return False
        events: list[Any] = [_Record(consumer_message(tp, record)) for record in records]
        self.store.apply_changelog_batch(events)
        return True
