"""One app id, two assignors: a stock Faust app and a streamapp app sharing group ``it-foreign``.

The stock one runs first; the streamapp worker must then refuse to start, naming the cause.
"""

from __future__ import annotations

from typing import Any

import faust

from streamapp import App

GROUP = "it-foreign"
TOPIC = "it-foreign-events"

stock = faust.App(GROUP, topic_partitions=2)
ours = App(GROUP, topic_partitions=2)


def _agent(app: faust.App) -> None:
    topic = app.topic(
        TOPIC,
        key_type=str,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=2,
    )

    @app.agent(topic)
    async def consume(stream: Any) -> None:
        async for _ in stream:
            pass


_agent(stock)
_agent(ours)
