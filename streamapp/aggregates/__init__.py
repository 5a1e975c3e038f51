"""Windowed aggregates as framework features: tumbling, hopping, sliding and session windows over
event time.

Declared like every join (`streamapp.joins` states the one shape): ``WindowedAggregate(app,
name, source=..., windows=..., initial=..., fold=..., output=...)``, or
``WindowedAggregate.count(...)``; the source a topic or a `Source`, and the same ``partitions``,
``on_record``, ``batch_records`` and ``dead_letter_topic`` keywords. `Outcome`, `Source` and
`SourceRecord` are the joins' own (one of each for the whole package).

The pure rules live in `streamapp.aggregates.window` (which windows, when one closes) and the
processors (`AggregateProcessor`, `SessionProcessor`, `SlidingProcessor`: the fold, lateness,
expiry over a store); the Faust wiring in `streamapp.aggregates.windowed`. See docs/windows.md.

The old spellings ``windowed_aggregate``, ``windowed_count`` and ``time_ms=`` still work for one
release, with a `DeprecationWarning`.
"""

from streamapp.aggregates.core import AggregateProcessor, ClosedWindow
from streamapp.aggregates.sessions import SessionProcessor
from streamapp.aggregates.sliding import SlidingProcessor
from streamapp.aggregates.window import SessionWindows, SlidingWindows, Windows
from streamapp.aggregates.windowed import (
    WindowedAggregate,
    WindowResult,
    windowed_aggregate,
    windowed_count,
)
from streamapp.joins.outcome import Outcome
from streamapp.joins.sources import Source, SourceRecord, UndecodableRecord

__all__ = [
    "AggregateProcessor",
    "ClosedWindow",
    "Outcome",
    "SessionProcessor",
    "SessionWindows",
    "SlidingProcessor",
    "SlidingWindows",
    "Source",
    "SourceRecord",
    "UndecodableRecord",
    "WindowResult",
    "WindowedAggregate",
    "Windows",
    "windowed_aggregate",
    "windowed_count",
]
