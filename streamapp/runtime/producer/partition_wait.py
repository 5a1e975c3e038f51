"""A write to a partition the producer's metadata does not have waits for it instead of
crashing the worker.

aiokafka 0.14's ``AIOKafkaProducer.send`` asserts that an explicitly given partition is in its
metadata (``AssertionError: Unrecognized partition``). Faust writes every table change to the
changelog partition of the table's partition, so a changelog deleted while the worker runs, or
recreated with fewer partitions, or recreated while the producer still holds the metadata of
the topic it replaced, crashed Faust's ProducerBuffer and the worker with it. Here such a send
first waits until the partition exists: it refreshes the producer's metadata with a backoff
(doubling to `MAX_WAIT_S`) for as long as it takes. The table's agent waits with it, and
`streamapp.changelog_watch` says once which changelog is wrong and what to do.

`streamapp.runtime.producer.client.WorkerProducer.send` waits here; aiokafka's own ``send``,
and every other producer in the process, are left as they are. Public aiokafka names only:
the producer's ``client``, its ``cluster.partitions_for_topic`` and ``force_metadata_update``,
and ``partitions_for``.
Tests: tests/unit/streamapp/runtime/producer/test_partition_wait.py;
tests/integration/test_changelog_deleted.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aiokafka import errors as kafka_errors

#: The longest wait between two metadata refreshes while a partition is missing.
MAX_WAIT_S = 5.0


def known(producer: Any, topic: str, partition: int) -> bool:
    """Whether the producer's metadata has this partition (``send`` would take the record)."""
    partitions = producer.client.cluster.partitions_for_topic(topic)
    return partitions is not None and partition in partitions


async def wait_for_partition(producer: Any, topic: str, partition: int) -> None:
    """Until the producer's metadata has this partition, however long that takes."""
    delay = 0.1
    while not known(producer, topic, partition):
        # A refresh asks only for the topics the client tracks: a topic this producer has
        # never sent to is tracked by ``partitions_for`` (aiokafka's own send does the same
        # before it checks the partition), else the refresh never brings it and the send
        # waited for ever (the first exactly_once changelog write of each transactional
        # producer did, and the demo stalled). It raises when the topic stays unknown for
        # the request timeout: a deleted changelog, which the loop waits out.
        with contextlib.suppress(kafka_errors.KafkaError):
            await producer.partitions_for(topic)
        if known(producer, topic, partition):
            return
        await producer.client.force_metadata_update()
        if known(producer, topic, partition):
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_WAIT_S)
