"""Reads and writes of Faust/aiokafka internals for the rest of streamapp (see the package docs).

Each function names the internal it touches in its docstring; the names are listed in
`streamapp.faust_compat.PRIVATE_NAMES` and checked at import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faust.assignor.client_assignment import ClientAssignment


def group_coordinator(app: Any) -> Any | None:
    """aiokafka's GroupCoordinator of the app's consumer, or None before it exists.

    Faust's ``Consumer._thread`` (its consumer thread), its ``_consumer`` (the AIOKafkaConsumer)
    and aiokafka's ``AIOKafkaConsumer._coordinator``.
    """
    try:
        coordinator: Any = app.consumer._thread._consumer._coordinator
    except AttributeError:
        return None
    return coordinator


def request_rejoin(app: Any) -> None:
    """Ask the group to rebalance, on the consumer thread that owns the coordinator."""
    thread = app.consumer._thread
    coordinator = thread._consumer._coordinator
    thread.thread_loop.call_soon_threadsafe(coordinator.request_rejoin)


def refresh_worker_metadata(app: Any) -> None:
    """Ask the app's worker consumer, on its consumer thread, for fresh cluster metadata
    (Faust's ``Consumer._thread``, its ``_consumer`` and aiokafka's ``AIOKafkaConsumer._client``).

    Its view of a topic deleted and created again is not refreshed before its metadata max age
    (minutes) unless one of its own requests fails on the topic; offsets are asked on a
    connection of their own (transport fix 14), so none does. Fresh metadata lets aiokafka see
    the topic's partitions again and rejoin the group, and a leader plan with them. Asked as
    the offsets reader finds a topic unknown or back (`unknown_topics`), and by the changelog
    watch as a changelog is right again. Safe from any thread."""
    thread = app.consumer._thread
    client = thread._consumer._client
    thread.thread_loop.call_soon_threadsafe(client.force_metadata_update)


async def refresh_worker_metadata_now(app: Any) -> None:
    """Fresh cluster metadata for the app's worker consumer, awaited; on its consumer thread's
    loop only (the leader's plan runs there). The same internals as `refresh_worker_metadata`.
    """
    await app.consumer._thread._consumer._client.force_metadata_update()


def aiokafka_membership(client: Any) -> tuple[str | None, int]:
    """The member id and generation of an aiokafka consumer in its group (None, -1: none yet;
    aiokafka's ``AIOKafkaConsumer._coordinator``)."""
    coordinator = client._coordinator
    if coordinator is None:
        return None, -1
    member_id = getattr(coordinator, "member_id", None)
    generation = getattr(coordinator, "generation", -1)
    return (member_id or None), int(generation if generation is not None else -1)


def aiokafka_request_rejoin(client: Any) -> None:
    """Ask the group of an aiokafka consumer to rebalance (``AIOKafkaConsumer._coordinator``)."""
    coordinator = client._coordinator
    if coordinator is not None:
        coordinator.request_rejoin()


async def aiokafka_refresh_metadata(client: Any) -> None:
    """Fresh cluster metadata for an aiokafka consumer (``AIOKafkaConsumer._client``)."""
    await client._client.force_metadata_update()


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
