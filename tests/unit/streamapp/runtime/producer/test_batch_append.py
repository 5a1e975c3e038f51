"""batch_append on streamapp's own producer: its records go into the open batch, past its send;
and its flush sends the open batches at once.

The rest of batch_append (full batches, transactions, deliveries) is tested in
tests/unit/streamapp/sending/test_batch_changelog.py, on aiokafka's producer.
"""

from __future__ import annotations

import asyncio
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


async def test_a_worker_producer_s_flush_sends_the_open_batches_without_their_linger() -> None:
    for cls, sent_at_once in ((WorkerProducer, True), (AIOKafkaProducer, False)):
        producer = cls(bootstrap_servers="127.0.0.1:9", linger_ms=60_000)
        producer.client.cluster.update_metadata(_metadata_with("outputs", 2))
        accumulator = producer._message_accumulator
        tp = TopicPartition("outputs", 1)
        await accumulator.add_message(tp, b"k", b"v", timeout=1.0)
        flushing = asyncio.ensure_future(producer.flush())
        await asyncio.sleep(0)
        # What aiokafka's sender would send now: the batch, a minute before its linger ends.
        nodes, _ = accumulator.drain_by_nodes(ignore_nodes=set())
        batches = [batch for node in nodes.values() for batch in node.values()]
        assert bool(batches) is sent_at_once, cls.__name__
        for batch in batches or [b for q in accumulator._batches.values() for b in q]:
            batch.done_noack()
        await flushing
        await producer.stop()
