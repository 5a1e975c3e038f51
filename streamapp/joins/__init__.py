"""Joins as framework features: a windowed stream-stream join and a stream-table join (latest
value, or temporal: as of each record's event time).

One shape for every join and aggregate (`streamapp.aggregates` too): a class, declared as

    Kind(app, name, <inputs, by role>, <the rule>, output=..., <the common keywords>)

- **Inputs** are named by their role: ``left`` and ``right`` (`WindowedJoin`), ``stream`` and
  ``table`` (`StreamTableJoin`), ``source`` (`streamapp.aggregates.WindowedAggregate`). Each is
  a topic, or a `Source` saying how to read its records: ``Source(topic, time_ms=..., id=...)``
  (event time from the decoded value, else the Kafka timestamp; what a record is about, for
  duplicates).
- **The rule**: ``window`` and ``kind`` (windowed join), ``kind`` and ``history_ms`` (stream-table
  join), ``windows``, ``initial``, ``fold`` and ``merge`` (aggregate).
- **Output**: ``output`` is a topic (the value is ``to_value(result)``, the key the source key)
  or a callback, plain or async, taking the result (`JoinResult`, `Enrichment`,
  `streamapp.aggregates.WindowResult`).
- **Common keywords**, the same on every class: ``partitions`` (the sources' partition count;
  by default the one the topics declare), ``on_record`` (called with a `SourceRecord` for every
  source record once handled, its `Outcome` among them), ``batch_records`` (read the sources
  in batches of up to that many records), ``dead_letter_topic`` (where late records go).
- **Bad records**: every record of every input is decoded when it arrives; one that cannot be
  read (`UndecodableRecord`) changes no state and meets the app's ``bad_record_policy``.

The old spellings (``windowed_join``, ``stream_table_join``, ``left_time_ms``, ``combine``,
``table_topic``, ``JoinRecord``...) still work for one release, with a `DeprecationWarning`.

The pure rules live in `streamapp.joins.window`, `streamapp.joins.core`,
`streamapp.joins.temporal` and `TableLookup`; the Faust wiring in
`streamapp.joins.stream_stream` and `streamapp.joins.stream_table`. See docs/joins.md.
"""

from typing import Any

from streamapp.joins.outcome import Outcome
from streamapp.joins.sources import Source, SourceRecord, UndecodableRecord
from streamapp.joins.stream_stream import JoinResult, WindowedJoin, windowed_join
from streamapp.joins.stream_table import (
    Enrichment,
    StreamTableJoin,
    TableLookup,
    stream_table_join,
)
from streamapp.joins.temporal import TableHistory
from streamapp.joins.window import JoinKind, JoinWindow, Side

__all__ = [
    "Enrichment",
    "JoinKind",
    "JoinResult",
    "JoinWindow",
    "Outcome",
    "Side",
    "Source",
    "SourceRecord",
    "StreamTableJoin",
    "TableHistory",
    "TableLookup",
    "UndecodableRecord",
    "WindowedJoin",
    "stream_table_join",
    "windowed_join",
]


def __getattr__(name: str) -> Any:
    # Old names kept for one release: each warns where it is used.
    if name == "JoinRecord":
        from streamapp.joins import deprecations

        deprecations.warn("streamapp.joins.JoinRecord", "streamapp.joins.SourceRecord")
        return SourceRecord
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
