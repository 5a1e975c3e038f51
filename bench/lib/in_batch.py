"""A batch's source partition and current event, as the per-call benchmarks of the batch path
(``bench/batch_table.py``, ``bench/batch_outputs.py``) set them up without a worker."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from faust.streams import _current_event
from faust.types import TP

SOURCE = TP("bench-source", 2)


@dataclass
class Message:
    """A record of the batch's partition: its topic and partition are all that is read."""

    topic: str = SOURCE.topic
    partition: int = SOURCE.partition


@dataclass
class Event:
    """What Faust's ``current_event()`` returns in a batch: its partition is all that is read."""

    message: Message = field(default_factory=Message)


def set_current_event() -> Event:
    """Make a batch's last event the current one, as `streamapp.batches` does; keep the
    returned event alive while it is (Faust holds it by a weak reference)."""
    event = Event()
    _current_event.set(weakref.ref(event))  # type: ignore[arg-type]
    return event
