"""Opening the stores a rebalance assigns, one per turn of the event loop.

Both steps a rebalance takes for a store open it: the check for damage a read-only open, the
replay's start (reading its persisted offset) the store itself. rocksdict holds the GIL through
an open (tens of ms on a busy machine, more to create a store): run on a thread, an open stops
the event loop just the same. A worker given several replicas at once (a rolling restart, a
scale-out) stopped the partitions it kept for the sum of those opens; here each stop is one
open, and the kept partitions' records are processed between them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from faust.types import TP

from streamapp.runtime.stores import RocksDBStore
from tables import store_guard

logger = logging.getLogger(__name__)

#: How long the event loop runs other work before each store a rebalance opens: a tick of a
#: kept partition takes several turns of the loop from its fetch to its agent.
PAUSE_BETWEEN_OPENS = 0.01


async def one_store_a_turn(
    table: Any, tps: set[TP], step: Callable[[Any, list[TP]], object]
) -> None:
    """``step`` for each of the table's changelog partitions in ``tps`` whose store is not open
    here, one per turn of the event loop."""
    store = store_guard.rocksdb_store(table)
    if not isinstance(store, RocksDBStore):
        return
    topic = store_guard.changelog_topic(table)
    for tp in sorted(tp for tp in tps if tp.topic == topic):
        if tp.partition in store.open_handles:
            continue  # open already: neither step has anything to do
        closing = store.pending_close(tp.partition)
        if closing is not None:
            # Revoked a moment ago: its close (off the event loop) releases the store's lock.
            await asyncio.wrap_future(closing)
        else:
            await asyncio.sleep(PAUSE_BETWEEN_OPENS)
        if tp.partition not in store.open_handles:
            step(table, [tp])


def open_store(table: Any, tps: list[TP]) -> None:
    """Open the stores of ``tps``, reading their persisted offsets."""
    for tp in tps:
        try:
            table.persisted_offset(tp)
        except Exception as exc:  # rocksdict raises plain Exception
            # Left to the store's own open, next: it retries a lock and raises anything else.
            logger.debug("streamapp: store %s %s not opened ahead: %s", table.name, tp, exc)
