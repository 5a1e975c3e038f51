"""The private names of Faust (faust-streaming) streamapp still uses, each in one module, and why.

streamapp's runtime (`streamapp.runtime`: its Kafka driver, consumer and fetch loop, the
tables' recovery, the store, the producer, the group protocol) stands behind Faust's public
extension points. Where Faust opens no door, a module of streamapp's reaches into it, and the
names it uses are listed here with the reason no public way exists:

- `streamapp.streams.stream` (the App's ``Stream`` setting): an agent's records taken a run at a
  time. Faust's ``Stream.__aiter__`` is the only way into its iteration, and the state a stream
  keeps about it has no public name.
- `streamapp.streams.batch_stream`: a batch agent's current event, set as Faust's iteration
  sets it, so ``faust.current_event()`` and ``stream.current_event`` are right in a batch.
- `streamapp.sending.direct_send` (the App's ``Topic`` setting): ``Topic.send`` hands the record
  to the producer in one coroutine and resolves the send's future with Faust's own callback.
- `streamapp.table_writes.window_clock`: a windowed table's ``relative_to_now()`` and
  ``.now()``, read from streamapp's own window expiry index.
- `streamapp.sending.threaded_producer`: Faust's threaded producer (``producer_threaded``)
  builds its aiokafka producer in a private method, which streamapp's producer must feed.

aiokafka's private names are used by two packages only, each with its own list and check: the
group protocol (`streamapp.runtime.group`) and the producer's batch append
(`streamapp.runtime.producer`). A unit test reads every module of streamapp for private names
of Faust, mode and aiokafka, and fails on one that is not listed for that module.

At import (`streamapp.App` imports this module), the installed Faust and aiokafka are checked to
be releases in the ranges pyproject.toml names, and every listed name to still exist: anything
else stops the worker with one line naming what changed, rather than letting an override of a
renamed method silently never be called. Set ``STREAMAPP_SKIP_FAUST_CHECK=1`` to try other
releases at your own risk.
"""

from __future__ import annotations

import os

# The check is shared with the runtime's own (`streamapp.runtime.library_check`).
from streamapp.runtime.library_check import Ranges, has_name, name_problems, version_problems

#: The releases these names were checked against, as ranges (pyproject.toml names the same): a
#: bug-fix release of either keeps the names, which the check confirms.
RELEASES: Ranges = {"faust-streaming": ((0, 15, 3), (0, 16)), "aiokafka": ((0, 14), (0, 15))}

#: ``module:Class`` -> private name -> the one streamapp module that uses it. A name is found as
#: a class attribute or as ``self.<name>`` in the code of the class or one of its bases
#: (`_has_name`).
PRIVATE_NAMES: dict[str, dict[str, str]] = {
    "faust.streams:Stream": {
        # Faust's Python iteration, which acks through Consumer.ack: what a stream that does
        # not take runs iterates, as Faust's own __aiter__ does.
        "_py_aiter": "streamapp.streams.stream",
        # The iterations the stream's on_stop closes: a run's iteration must be among them.
        "_active_agens": "streamapp.streams.stream",
        # Set as Faust's iteration sets it: no operator is added to a stream being iterated.
        "_finalized": "streamapp.streams.stream",
        # The stream's and faust.current_event()'s event, per event of a run.
        "_set_current_event": "streamapp.streams.stream",
        # What Faust's iteration does when its channel ends.
        "_channel_stop_iteration": "streamapp.streams.stream",
    },
    "faust.topics:Topic": {
        # Faust's delivery callback of a send: the FutureMessage resolved, sensors, callbacks.
        "_on_published": "streamapp.sending.direct_send",
    },
    "faust.channels:Channel": {
        # Read, not called: a topic class that overrides it keeps Faust's whole send path, so
        # that its override is not skipped.
        "_send_now": "streamapp.sending.direct_send",
    },
    "faust.transport.drivers.aiokafka:ThreadedProducer": {
        # Builds the thread's aiokafka producer from the driver producer's private settings:
        # overridden to take the settings of streamapp's app producer.
        "_new_producer": "streamapp.sending.threaded_producer",
    },
    "faust.tables.base:Collection": {
        # Called by Faust's window wrapper (relative_to_now) and WindowSet.now(): overridden to
        # read streamapp's own expiry index, which Faust has no other door to.
        "_relative_now": "streamapp.table_writes.window_clock",
    },
}

#: Modules allowed a listed name beyond the one that owns it: the batch agent's current event
#: is set by the same two calls as the stream's.
SHARED: dict[str, tuple[str, ...]] = {
    "streamapp.streams.batch_stream": ("_set_current_event", "_channel_stop_iteration"),
}


def names_by_module() -> dict[str, set[str]]:
    """Module -> the private names it may use."""
    found: dict[str, set[str]] = {}
    for names in PRIVATE_NAMES.values():
        for name, module in names.items():
            found.setdefault(module, set()).add(name)
    for module, shared in SHARED.items():
        found.setdefault(module, set()).update(shared)
    return found


#: A listed name counts as present if the class has it or its code sets or reads it on self.
_has_name = has_name


class FaustCompatError(ImportError):
    """The installed Faust or aiokafka is not what streamapp's touch points were written for."""


def problems(names: dict[str, dict[str, str]], releases: Ranges) -> list[str]:
    """What differs from what the touch points expect: releases, then missing names."""
    return version_problems(releases) + name_problems(
        {owner: tuple(listed) for owner, listed in names.items()}
    )


def check() -> None:
    """Raise `FaustCompatError` (one line) unless every touch point still holds."""
    if os.environ.get("STREAMAPP_SKIP_FAUST_CHECK") == "1":
        return
    found = problems(PRIVATE_NAMES, RELEASES)
    if found:
        raise FaustCompatError(
            "streamapp cannot run on these Faust/aiokafka releases: "
            + "; ".join(found)
            + " (install releases in the ranges pyproject.toml names, or set"
            " STREAMAPP_SKIP_FAUST_CHECK=1)"
        )


check()
