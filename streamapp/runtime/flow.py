"""The app's flow control (``app.flow_control``): Faust's, whose clear says what it dropped.

Faust's flow control empties the streams' queues when asked (``clear``), and its ``resume``
clears them too. Records a stream never took are then dropped unprocessed, and a partition whose
records were dropped would stop committing at the first of them for good: nothing fetches them
again while the partition keeps flowing (under the cooperative protocol it is never sought).

Here a clear takes the records out of each queue it manages and hands them to the consumer
(`on_dropped`), which sends each partition back to its first dropped record to process those
once more (`streamapp.runtime.consumer.Consumer.on_dropped`). Records of a partition given up
meanwhile are left to its next owner, from the offset committed as it was given up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any
from weakref import WeakSet

from mode.utils.queues import FlowControlEvent, FlowControlQueue


class FlowControl(FlowControlEvent):
    """Faust's flow control (see the module)."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(loop=loop)
        self.cleared_queues: WeakSet[FlowControlQueue[Any]] = WeakSet()
        #: Told what a clear took out of the queues, and whether the flow runs on (the app's
        #: consumer, once it exists).
        self.on_dropped: Callable[[Sequence[Any], bool], None] | None = None

    def manage_queue(self, queue: FlowControlQueue[Any]) -> None:
        self.cleared_queues.add(queue)

    def clear(self) -> None:
        dropped: list[Any] = []
        for queue in list(self.cleared_queues):
            while not queue.empty():
                try:
                    dropped.append(queue.get_nowait())
                except asyncio.QueueEmpty:
                    break
        # A clear while the flow is suspended (the worker stops) drops what it drops: the
        # records are processed again after the restart, from the committed offsets.
        if dropped and self.on_dropped is not None:
            self.on_dropped(dropped, self.is_active())
