"""Reads and writes of Faust/aiokafka internals for the rest of streamapp (see the package docs).

Each function names the internal it touches in its docstring; the names are listed in
`streamapp.faust_compat.PRIVATE_NAMES` and checked at import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faust.assignor.client_assignment import ClientAssignment


def consumer_if_created(app: Any) -> Any | None:
    """The app's consumer if Faust created it, without creating one (``App._consumer``)."""
    consumer: Any = app._consumer
    return consumer


async def refresh_metadata(consumer: Any) -> None:
    """Fresh cluster metadata for an AIOKafkaConsumer (``AIOKafkaConsumer._client``): a topic
    created a moment ago may not be in its cached view yet."""
    await consumer._client.force_metadata_update()


def install_assignment(
    assignor: Any, assignment: ClientAssignment, topic_groups: Mapping[str, int]
) -> None:
    """Hand a client assignment to Faust's PartitionAssignor the way its own ``on_assignment``
    does (``_assignment``, ``_active_tps``, ``_standby_tps``, ``_topic_groups``): the rest of
    Faust reads them there (assigned_actives, assigned_standbys, group_for_topic)."""
    assignor._assignment = assignment
    assignor._active_tps = assignment.active_tps
    assignor._standby_tps = assignment.standby_tps
    assignor._topic_groups = dict(topic_groups)


def assignor_url(assignor: Any) -> str:
    """The web URL Faust's PartitionAssignor announces for this worker (``_url``)."""
    return str(assignor._url)


def aiokafka_sticky_metadata(
    topics: list[str], owned: list[Any] | None, generation: int = -1
) -> Any:
    """The subscription metadata aiokafka's StickyPartitionAssignor would send for a member
    owning ``owned`` (``StickyPartitionAssignor._metadata``; its public ``metadata`` reads the
    class's own last assignment). For benchmarks that run it beside ours."""
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    return StickyPartitionAssignor._metadata(topics, owned, generation)
