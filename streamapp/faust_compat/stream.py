"""streamapp's ``Stream`` (the App's ``Stream`` setting): Faust's, iterated by its Python path.

Faust iterates a stream with a Cython iterator when its extension is built, and that iterator
acks each record by writing the acked offsets straight into the private bookkeeping of Faust's
own consumer class (``_acked``, ``_acked_index``, ``_committed_offset``, ...), not through
``Consumer.ack``. streamapp's consumer is its own (`streamapp.runtime.consumer`): its acks must
go through ``Consumer.ack``, which Faust's Python path calls (``Event.ack`` ->
``Message.ack`` -> ``ConsumerMessage.on_final_ack``).

Faust private names (`streamapp.faust_compat.PRIVATE_NAMES`): ``Stream._py_aiter`` (Faust's
Python iteration) and ``Stream._active_agens`` (the iterators its ``on_stop`` closes), as
Faust's own ``__aiter__`` uses them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import faust


class Stream(faust.Stream[Any]):
    """Faust's stream, always iterated by Faust's Python path (see the module)."""

    def __aiter__(self) -> AsyncIterator[Any]:
        it = self._py_aiter()
        self._active_agens.add(cast(Any, it))
        return it
