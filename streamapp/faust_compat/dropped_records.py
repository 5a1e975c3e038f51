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
it was not processed, and its offset is never committed past.

Where nothing else brings such a record back, it is fetched again (fix 27). A clear while the
flow is suspended needs nothing: Faust suspends it for a stop (the next owner reads on from the
committed offset) and for an eager revocation (its recovery seeks every partition to its
committed offset). A clear while the flow runs on (an overtaken recovery pass resumed the flow
in an incremental rebalance, `streamapp.faust_compat.incremental`; any future path) drops
records of partitions the worker keeps and never seeks: each such partition goes back to the
first record dropped, and the hand-out ledger lets the dropped records out once more and
nothing else of the partition before them (`streamapp.hand_out`, `transport.Consumer.
rewind_dropped`). Not covered: a record the hand-out was still taking to a queue as it was
cleared (waiting for the producer buffer to ebb) lands after the clear, ahead of the dropped
ones; a dropped record deleted (retention, compaction) before it is fetched again holds its
partition's hand-out until the partition is revoked; and a record two streams of a topic took,
one processing it and the other dropping it, is handed to both again.

Delete when the hand-out tracks records as Faust does (as its stream takes them), or Faust's
clear untracks what it drops, and its flow control no longer empties the queues of partitions
kept flowing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from faust.types import TP, Message

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


def untrack_dropped(consumer: Any, dropped: Counter[Message]) -> dict[TP, list[int]]:
    """``dropped`` left the queues unprocessed: what no channel holds any more is no longer
    handed out (never acked). Returns those records' offsets, by partition."""
    unacked = consumer._unacked_messages
    untracked: dict[TP, list[int]] = {}
    for message, times in dropped.items():
        if message.acked:
            continue
        if message.decref(times) == 0:
            unacked.discard(message)
            untracked.setdefault(message.tp, []).append(message.offset)
    return untracked


class UntrackingFlowControl(incremental.IncrementalFlowControl):
    """The app's flow control: its ``clear`` (which ``resume`` calls too) untracks the records
    it drops. ``consumer`` gives the app's consumer (created lazily, asked only when a record
    was dropped)."""

    #: The flow was suspended as the ``resume`` under way began (its clear comes after the
    #: flow is active again); None outside a resume.
    _resuming_suspended: bool | None = None

    def __init__(self, *, consumer: Callable[[], Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.consumer_of = consumer

    def resume(self) -> None:
        self._resuming_suspended = not self.is_active()
        try:
            super().resume()
        finally:
            self._resuming_suspended = None

    def clear(self) -> None:
        suspended = self._resuming_suspended
        if suspended is None:
            suspended = not self.is_active()
        # mode's FlowControlEvent keeps the queues it empties in a weak set.
        dropped = queued_messages(list(self._queues))
        super().clear()
        if not dropped:
            return
        consumer = self.consumer_of()
        untracked = untrack_dropped(consumer, dropped)
        if untracked and not suspended:
            # Nothing seeks a partition kept flowing: its records come back only this way.
            consumer.rewind_dropped(untracked)
