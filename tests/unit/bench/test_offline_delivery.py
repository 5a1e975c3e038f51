"""The benchmarks' sender without a broker (`bench.lib.offline_delivery`): the one module of
bench/ allowed an aiokafka internal. It lists the name in its PRIVATE_NAMES and checks it as it
is imported; read here for every private name it uses, and run on a real aiokafka producer that
is never started."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.protocol.metadata import MetadataResponse_v1

from bench.lib import offline_delivery
from bench.lib.offline_delivery import OfflineDelivery
from streamapp.runtime import library_check
from tests.unit.streamapp.test_faust_private_names import (
    BENCH_INTERNALS,
    _own_names,
    _third_party_private_names,
)

TOPIC = "offline"


def test_the_installed_aiokafka_passes_its_check() -> None:
    assert library_check.version_problems(offline_delivery.AIOKAFKA_RELEASES) == []
    assert library_check.name_problems(offline_delivery.PRIVATE_NAMES) == []


def test_every_private_name_it_uses_is_in_its_list() -> None:
    (path,) = BENCH_INTERNALS
    assert path.resolve() == Path(offline_delivery.__file__).resolve()
    theirs = _third_party_private_names()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in theirs
    } - _own_names(tree)
    listed = {name for names in offline_delivery.PRIVATE_NAMES.values() for name in names}
    assert "_message_accumulator" in used  # the scan sees its use
    assert used <= listed


def _producer() -> AIOKafkaProducer:
    """A producer never started, whose metadata is given: 2 partitions, led by broker 0."""
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", linger_ms=0)
    described = [(0, TOPIC, False, [(0, p, 0, [0], [0]) for p in range(2)])]
    producer.client.cluster.update_metadata(
        MetadataResponse_v1([(0, "127.0.0.1", 9092, None)], 0, described)
    )
    return producer


async def test_each_delivery_resolves_the_sends_at_offsets_counted_per_partition() -> None:
    producer = _producer()
    delivery = OfflineDelivery(producer)
    first = [await producer.send(TOPIC, b"v", partition=i % 2) for i in range(5)]
    assert not any(f.done() for f in first)
    delivery.deliver()
    await asyncio.sleep(0)
    assert [(f.result().partition, f.result().offset) for f in first] == [
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
        (0, 2),
    ]
    second = [await producer.send(TOPIC, b"v", partition=p) for p in (1, 0)]
    delivery.deliver()
    await asyncio.sleep(0)
    # Offsets go on from where the last delivery left each partition.
    assert [(f.result().partition, f.result().offset) for f in second] == [(1, 2), (0, 3)]
    await producer.stop()
