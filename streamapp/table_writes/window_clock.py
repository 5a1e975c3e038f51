"""Faust's ``relative_to_now()`` and ``.now()`` of a windowed table, on streamapp's expiry index.

In an agent, Faust reads a windowed table "now" at the latest window end written in the
event's partition, which its expiry heap keeps (``Collection._partition_latest_timestamp``).
streamapp keeps a windowed table's expiry in its own index (`streamapp.key_expiry`, run by
`streamapp.expiring_tables`), so the table's clock is read there: `latest_window_end`.
Outside an agent (a web view, a timer) it is the wall clock, as Faust's.

Faust private name this module uses (`streamapp.private_names.PRIVATE_NAMES`):
``faust.tables.base.Collection._relative_now``, overridden: Faust's window wrapper
(``relative_to_now``) and ``WindowSet.now()`` call it, and Faust has no other door to it.
"""

from __future__ import annotations

import time
from typing import Any

import faust
from faust.types import EventT

# The Faust private names this module uses are checked as it is imported.
import streamapp.private_names  # noqa: F401


class WindowClock(faust.Table[Any, Any]):
    """A table whose "now" in an agent is `latest_window_end` of the event's partition."""

    def latest_window_end(self, partition: int) -> float:
        """The latest window end written in ``partition`` (0.0 if none, as Faust's)."""
        return 0.0

    def _relative_now(self, event: EventT[Any] | None = None) -> float:
        event = event if event is not None else faust.current_event()
        if event is None:
            return time.time()
        return self.latest_window_end(event.message.partition)
