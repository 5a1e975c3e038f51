"""Records handed out to a stream's queue and dropped there unprocessed stop counting as
handed out, at once (transport fix 23).

Faust's flow control empties every stream queue (``FlowControlEvent.clear``) when a worker
stops (``App._stop_consumer``) and on each ``resume`` (an eager revocation's recovery). Stock
Faust tracks a record only as its stream takes it from the queue, so what it drops there was
never counted; streamapp's hand-out tracks a record as it goes into the queue (a commit waits
for the records queued too), so a dropped one stayed in the consumer's set of records handed
out and not processed (a weak set) until garbage-collected. A strong reference elsewhere (the
fetch loop's last record, say) kept it there for good: the stop's ``wait_empty`` then waited
for it forever, and each commit's wait ran into its deadline.

Each dropped event gives its record's channel reference back (the conductor counted one per
channel it was put in); a record no channel holds any more leaves the set. It is not acked:
it was not processed, and its offset is never committed past. It is fetched again from the
committed offset only where something seeks there: an eager rebalance, a restart, the next
owner. A partition kept flowing through an incremental rebalance is never sought back, so a
record dropped from its queue stops that partition's commits for good: such a rebalance keeps
the queues (`streamapp.faust_compat.incremental`), and only a stop may empty them. Delete when
the hand-out tracks records as Faust does (as its stream takes them), or Faust's clear
untracks what it drops.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from faust.types import Message

from streamapp.faust_compat import incremental


def queued_messages(queues: Iterable[Any]) -> Counter[Message]:
    """The records of the events ``queues`` hold, each with how many times it is there."""
    held: Counter[Message] = Counter()
    for queue in queues:
        # mode's FlowControlQueue is an asyncio.Queue: its items are in its deque.
        for item in queue._queue:
            message = getattr(item, "message", None)
            if isinstance(message, Message):
                held[message] += 1
    return held


def untrack_dropped(consumer: Any, dropped: Counter[Message]) -> None:
    """``dropped`` left the queues unprocessed: what no channel holds any more is no longer
    handed out (never acked)."""
    unacked = consumer._unacked_messages
    for message, times in dropped.items():
        if message.acked:
            continue
        if message.decref(times) == 0:
            unacked.discard(message)


class UntrackingFlowControl(incremental.IncrementalFlowControl):
    """The app's flow control: its ``clear`` (which ``resume`` calls too) untracks the records
    it drops. ``consumer`` gives the app's consumer (created lazily, asked only when a record
    was dropped)."""

    def __init__(self, *, consumer: Callable[[], Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.consumer_of = consumer

    def clear(self) -> None:
        # mode's FlowControlEvent keeps the queues it empties in a weak set.
        dropped = queued_messages(list(self._queues))
        super().clear()
        if dropped:
            untrack_dropped(self.consumer_of(), dropped)
