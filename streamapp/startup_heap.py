"""The worker's startup heap, kept out of Python's full garbage collections.

A worker builds most of its long-lived objects while it starts: the imported modules (Faust,
mode, aiokafka, the app's own), the app, its topics, tables, agents and services, the clients.
Python's cyclic collector looks at every one of them again in each full (generation 2)
collection, and those come as the heap grows: about 45 ms each, six times in an ad-click
benchmark worker's 6 s of CPU, two thirds of the 0.37 s it spent collecting. A collection
holds the GIL, so it stops the event loop and the consumer thread while it runs.

Once the worker has started, `freeze` collects what is garbage already and moves every object
left to the collector's permanent generation (``gc.freeze``), which no collection looks at.
Those objects are still freed when their last reference goes; only a reference cycle among
them would never be collected. Objects made later are collected as before.

`collect_all` is the full collection for the few places that need one to free a cycle (a
RocksDB handle still holding its lock, `streamapp.runtime.store_handles`): it puts the
frozen objects back in the collector's care first, collects, and freezes what is left again.
"""

from __future__ import annotations

import gc
import logging

logger = logging.getLogger(__name__)


def freeze() -> int:
    """Collect, then keep every object left out of later collections; returns how many."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.debug("streamapp: %d objects made at startup left out of garbage collections", frozen)
    return frozen


def collect_all() -> int:
    """A full collection that also looks at the objects `freeze` left out; returns what
    ``gc.collect`` found unreachable."""
    was_frozen = gc.get_freeze_count() > 0
    if was_frozen:
        gc.unfreeze()
    found = gc.collect()
    if was_frozen:
        gc.freeze()
    return found
