"""Windowed aggregates as framework features: tumbling and hopping windows over event time.

See docs/windows.md. The pure rules live in `streamapp.aggregates.window` (which windows,
when one closes) and `streamapp.aggregates.core` (the fold, lateness, expiry over a store);
the Faust wiring in `streamapp.aggregates.windowed`.
"""

from streamapp.aggregates.core import AggregateProcessor, ClosedWindow, Outcome
from streamapp.aggregates.window import Windows
from streamapp.aggregates.windowed import (
    WindowedAggregate,
    WindowResult,
    windowed_aggregate,
    windowed_count,
)

__all__ = [
    "AggregateProcessor",
    "ClosedWindow",
    "Outcome",
    "WindowResult",
    "WindowedAggregate",
    "Windows",
    "windowed_aggregate",
    "windowed_count",
]
