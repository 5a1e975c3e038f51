"""The one place streamapp touches private names of Faust (faust-streaming) and aiokafka.

streamapp's runtime (`streamapp.runtime`: the consumer, its fetch loop, the tables' recovery,
the store, the group protocol) stands behind Faust's public extension points. What is left
here reaches into Faust where it opens no door:

- its table classes: a write encoded once (`encode_once`) and, in a batch, with the partition
  and sensors looked up once (`batch_table`); a windowed table's "now" read from streamapp's
  own expiry index (`window_clock`, for `streamapp.expiring_tables`);
- its stream: an agent's records taken a run at a time and given one at a time, other streams
  iterated by Faust's Python path, which acks through the consumer (`stream`), and its current
  event set once per batch (`batch_stream`);
- its producer side: a batch's changelog records and join output sent together
  (`batch_changelog`),
  exactly_once sends in the transaction of the record they are made for (`sends`), a topic's
  sends handed to the producer without Faust's layers in between (`direct_send`), and Faust's
  threaded producer with the settings of streamapp's app producer (`threaded_producer`);
- its app's producer start (`app`).

Every private name those rely on is listed in `PRIVATE_NAMES` below, and nowhere else in
streamapp is one named (a unit test reads every module for them), except aiokafka's in the
worker's group protocol (`streamapp.runtime.group`) and producer (`streamapp.runtime.producer`),
each with its own list and check.

At import, this package checks that the installed Faust and aiokafka are releases in the
ranges these touch points were written against, and that each listed name still exists.
Anything else stops the worker with one line naming what changed, rather than letting an
override of a renamed method silently never be called. Set ``STREAMAPP_SKIP_FAUST_CHECK=1`` to
try other releases at your own risk.
"""

from __future__ import annotations

import os

# The check is shared with the runtime's own (`streamapp.runtime.library_check`).
from streamapp.runtime.library_check import Ranges, has_name, name_problems, version_problems

#: The releases these touch points were checked against, as ranges (pyproject.toml names the
#: same): a bug-fix release of either keeps the names they rely on, which the check confirms.
RELEASES: Ranges = {"faust-streaming": ((0, 15, 3), (0, 16)), "aiokafka": ((0, 14), (0, 15))}

#: ``module:Class`` -> the private names streamapp reads, writes or overrides on it (or on an
#: instance of it). A name is found as a class attribute or as ``self.<name>`` in the code of
#: the class or one of its bases (`_has_name`).
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "faust.streams:Stream": (
        "_py_aiter",  # stream: Faust's Python iteration, which acks through Consumer.ack
        "_active_agens",
        "_finalized",  # stream: set as Faust's iteration sets it (no operator added after)
        "_set_current_event",  # batch_stream: Faust's current event, once per batch
        "_channel_stop_iteration",
    ),
    "faust.topics:Topic": (
        "_on_published",  # direct_send: Faust's delivery callback of a send
    ),
    "faust.transport.drivers.aiokafka:ThreadedProducer": (
        "_new_producer",  # threaded_producer: its aiokafka producer, with the app producer's
    ),
    "faust.tables.base:Collection": (
        "_relative_now",  # window_clock: relative_to_now() / .now() on streamapp's expiry index
    ),
}


#: A listed name counts as present if the class has it or its code sets or reads it on self.
_has_name = has_name


class FaustCompatError(ImportError):
    """The installed Faust or aiokafka is not what streamapp's touch points were written for."""


def problems(names: dict[str, tuple[str, ...]], releases: Ranges) -> list[str]:
    """What differs from what the touch points expect: releases, then missing names."""
    return version_problems(releases) + name_problems(names)


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
