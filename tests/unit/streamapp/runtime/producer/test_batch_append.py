"""batch_append on streamapp's own producer: its records go into the open batch, past its send.

The rest of batch_append (full batches, transactions, deliveries) is tested in
tests/unit/streamapp/faust_compat/test_batch_changelog.py, on aiokafka's producer.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.protocol.metadata import MetadataResponse_v1
from aiokafka.structs import TopicPartition

from streamapp.runtime.producer import batch_append
from streamapp.runtime.producer.client import WorkerProducer


def _metadata_with(topic: str, partitions: int) -> Any:
    """A metadata answer (v1) of one broker leading every partition of ``topic``."""
    described = [(0, topic, False, [(0, p, 0, [0], [0]) for p in range(partitions)])]
    return MetadataResponse_v1([(0, "127.0.0.1", 9092, None)], 0, described)


async def _appended(producer: AIOKafkaProducer) -> tuple[Any, list[Any]]:
    """Three records of one partition handed to batch_append behind an open batch: the open
    batch, and the futures the first two records' delivery is known by."""
    producer.client.cluster.update_metadata(_metadata_with("t", 1))
    await producer.send("t", b"first", key=b"k", partition=0)  # an open batch
    (batch,) = producer._message_accumulator._batches[TopicPartition("t", 0)]
    records = [("table", "t", 0, b"a", b"1"), ("table", "t", 0, b"b", b"2")]
    records.append(("table", "t", 0, b"c", b"3"))
    ((last, earlier),) = (await batch_append.send(producer, records)).values()
    assert batch.record_count == 4 and not last.done()
    return batch, earlier


async def test_a_worker_producer_s_records_skip_its_send() -> None:
    producer = WorkerProducer(bootstrap_servers="127.0.0.1:9")
    try:
        batch, earlier = await _appended(producer)
        # Appended to the batch's builder: known by the batch's future, not one future each.
        assert earlier == [batch.future]
    finally:
        await producer.stop()


async def test_a_producer_with_a_send_of_its_own_still_gets_every_record() -> None:
    class Traced(WorkerProducer):
        async def send(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> Any:
            return await super().send(topic, value, key, **kw)

    producer = Traced(bootstrap_servers="127.0.0.1:9")
    try:
        batch, earlier = await _appended(producer)
        assert len(earlier) == 2 and batch.future not in earlier  # one future per record
    finally:
        await producer.stop()
