"""What `streamapp.batches` needs of Faust's stream: the current event set once per batch, and
the end of its iteration.

`set_current_event` is the stream's own ``_set_current_event``: Faust reads the current event
(``faust.current_event()``) to route a table write to its changelog partition and, in
`streamapp.sending.sends`, a send to its source partition's transaction. A batch is acked
by the consumer (`streamapp.runtime.consumer.Consumer.ack_batch`).

Faust private names this relies on (checked at import with the others,
`streamapp.private_names.PRIVATE_NAMES`): ``faust.streams.Stream._set_current_event`` and
``_channel_stop_iteration``. Tests: tests/unit/streamapp/test_batches.py;
tests/integration/test_batch_agent.py.
"""

from __future__ import annotations

from typing import Any

from faust.types import EventT, StreamT

# The Faust private names this module uses are checked as it is imported.
import streamapp.private_names  # noqa: F401


def set_current_event(stream: StreamT[Any], event: EventT[Any] | None) -> None:
    """``event`` is what Faust's ``current_event()`` returns in the agent's task; the stream's
    own ``current_event`` stays None: no single record of a batch is being processed."""
    stream._set_current_event(event)  # type: ignore[attr-defined]
    stream.current_event = None


def stop_iteration(stream: StreamT[Any]) -> None:
    """What Faust's stream iterator does with its channel when its iteration ends."""
    stream._channel_stop_iteration(stream.channel)  # type: ignore[attr-defined]
