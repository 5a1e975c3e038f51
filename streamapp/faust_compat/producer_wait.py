"""A write to a partition the producer's metadata does not have waits for it instead of
crashing the worker.

aiokafka 0.14's ``AIOKafkaProducer.send`` asserts that an explicitly given partition is in its
metadata (``AssertionError: Unrecognized partition``). Faust writes every table change to the
changelog partition of the table's partition, so a changelog deleted while the worker runs, or
recreated with fewer partitions, or recreated while the producer still holds the metadata of
the topic it replaced, crashed Faust's ProducerBuffer and the worker with it.
Here such a send first waits until the partition exists: it refreshes the producer's metadata
with a backoff (doubling to `MAX_WAIT_S`) for as long as it takes. The table's agent waits
with it, and `streamapp.changelog_watch` says once which changelog is wrong and what to do.

Installed once per process by `install` (from `streamapp.faust_compat.app`).
aiokafka names used: ``AIOKafkaProducer.send`` (wrapped) and ``partitions_for``, the producer's
``client`` and its ``cluster.partitions_for_topic`` and ``force_metadata_update``; checked at
import.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.client import AIOKafkaClient
from aiokafka.cluster import ClusterMetadata

from streamapp.faust_compat.once import once

#: The longest wait between two metadata refreshes while a partition is missing.
MAX_WAIT_S = 5.0

if (
    list(inspect.signature(AIOKafkaProducer.send).parameters)[:5]
    != ["self", "topic", "value", "key", "partition"]
    or not callable(getattr(AIOKafkaClient, "force_metadata_update", None))
    or not callable(getattr(AIOKafkaProducer, "partitions_for", None))
    or not callable(getattr(ClusterMetadata, "partitions_for_topic", None))
):
    raise RuntimeError(
        "streamapp.faust_compat.producer_wait: AIOKafkaProducer.send(topic, value, key, "
        "partition, ...), AIOKafkaClient.force_metadata_update or "
        "ClusterMetadata.partitions_for_topic changed "
        "(written for aiokafka 0.14); see the module's docstring"
    )

_original_send = AIOKafkaProducer.send


def _known(producer: Any, topic: str, partition: int) -> bool:
    partitions = producer.client.cluster.partitions_for_topic(topic)
    return partitions is not None and partition in partitions


async def wait_for_partition(producer: Any, topic: str, partition: int) -> None:
    delay = 0.1
    while not _known(producer, topic, partition):
        # A refresh asks only for the topics the client tracks: a topic this producer has
        # never sent to is tracked by ``partitions_for`` (aiokafka's own send does the same
        # before it checks the partition), else the refresh never brings it and the send
        # waited for ever (the first exactly_once changelog write of each transactional
        # producer did, and the demo stalled). It raises when the topic stays unknown for
        # the request timeout: a deleted changelog, which the loop waits out.
        with contextlib.suppress(kafka_errors.KafkaError):
            await producer.partitions_for(topic)
        if _known(producer, topic, partition):
            return
        await producer.client.force_metadata_update()
        if _known(producer, topic, partition):
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_WAIT_S)


async def _send(
    self: Any, topic: str, value: Any = None, key: Any = None, *args: Any, **kw: Any
) -> Any:
    partition = args[0] if args else kw.get("partition")
    # Known almost always: tested here, without a coroutine per send to find it out.
    if partition is not None and not _known(self, topic, partition):
        await wait_for_partition(self, topic, partition)
    return await _original_send(self, topic, value, key, *args, **kw)


@once
def install() -> None:
    """Wrap ``AIOKafkaProducer.send`` for this process."""
    AIOKafkaProducer.send = _send
