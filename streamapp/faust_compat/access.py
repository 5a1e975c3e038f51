"""Reads and writes of Faust/aiokafka internals for the rest of streamapp (see the package docs).

Each function names the internal it touches in its docstring; the names are listed in
`streamapp.faust_compat.PRIVATE_NAMES` and checked at import.
"""

from __future__ import annotations

from typing import Any


async def refresh_metadata(consumer: Any) -> None:
    """Fresh cluster metadata for an AIOKafkaConsumer (``AIOKafkaConsumer._client``): a topic
    created a moment ago may not be in its cached view yet."""
    await consumer._client.force_metadata_update()


def aiokafka_sticky_metadata(
    topics: list[str], owned: list[Any] | None, generation: int = -1
) -> Any:
    """The subscription metadata aiokafka's StickyPartitionAssignor would send for a member
    owning ``owned`` (``StickyPartitionAssignor._metadata``; its public ``metadata`` reads the
    class's own last assignment). For benchmarks that run it beside ours."""
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    return StickyPartitionAssignor._metadata(topics, owned, generation)
