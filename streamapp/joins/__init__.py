"""Joins as framework features: a windowed stream-stream join and a stream-table join.

See docs/joins.md. The pure rules live in `streamapp.joins.window` and `streamapp.joins.core`
(and `streamapp.joins.stream_table.TableLookup`); the Faust wiring in
`streamapp.joins.stream_stream` and `streamapp.joins.stream_table`.
"""

from streamapp.joins.core import Outcome
from streamapp.joins.stream_stream import JoinRecord, JoinResult, WindowedJoin, windowed_join
from streamapp.joins.stream_table import (
    Enrichment,
    StreamTableJoin,
    TableLookup,
    stream_table_join,
)
from streamapp.joins.window import JoinKind, JoinWindow, Side

__all__ = [
    "Enrichment",
    "JoinKind",
    "JoinRecord",
    "JoinResult",
    "JoinWindow",
    "Outcome",
    "Side",
    "StreamTableJoin",
    "TableLookup",
    "WindowedJoin",
    "stream_table_join",
    "windowed_join",
]
