"""What a join's output record costs over batches: sent at once, or held with the batch and
appended to the producer's open batches as it ends (`streamapp.joins._io.send_output`).

    .venv/bin/python -m bench.batch_outputs [--batches 100] [--records 700] [--rounds 5]

Per output record, in µs of CPU (best of ``--rounds`` alternating rounds: on a busy machine the
best is the least disturbed), from the join's send to the record's delivery: ``--batches``
batches of ``--records`` output records each (keyed by a unique id, as the ad-click demo's
attributions, over a topic of 6 partitions), then the batch's end, as `streamapp.batches` ends
it. "at once" is `streamapp.joins._io.send_raw` (Faust's producer ``send``, aiokafka's
``send``, a future per record); "with the batch" is ``send_output``. The producer is a real
aiokafka producer that is never started: its metadata is given, and its batches are taken as
aiokafka's sender takes them and marked delivered, which resolves their futures
(`bench.lib.offline_delivery`). No broker, so the network is in neither number.
Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.protocol.metadata import MetadataResponse_v1

from bench.lib.in_batch import SOURCE, Message, set_current_event
from bench.lib.offline_delivery import OfflineDelivery
from streamapp import App
from streamapp.joins import _io
from streamapp.sending import batch_changelog

OUTPUT = "bench-output"
PARTITIONS = 6


async def _per_record_us(app: Any, delivery: OfflineDelivery, held: bool, args: Any) -> float:
    source = Message()
    send = _io.send_output if held else _io.send_raw
    records = [
        (f"auction-{i:08d}".encode(), b'{"click_id": "c-%08d", "cost_micros": 120000}' % i)
        for i in range(args.records)
    ]
    start = time.process_time()
    for _ in range(args.batches):
        changelog = batch_changelog.begin(app, SOURCE)
        for key, value in records:
            await send(app, source, OUTPUT, key, value)
        await batch_changelog.end(changelog)
        delivery.deliver()
        await asyncio.sleep(0)  # the futures' callbacks run
    return (time.process_time() - start) / (args.batches * args.records) * 1e6


async def _main(args: Any) -> None:
    datadir = tempfile.TemporaryDirectory(prefix="bench-batch-outputs-")
    app = App("bench-batch-outputs", datadir=datadir.name, topic_partitions=PARTITIONS)
    app.in_worker = True
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", linger_ms=5, max_batch_size=65536)
    described = [(0, OUTPUT, False, [(0, p, 0, [0], [0]) for p in range(PARTITIONS)])]
    producer.client.cluster.update_metadata(
        MetadataResponse_v1([(0, "127.0.0.1", 9092, None)], 0, described)
    )
    app_producer: Any = app.producer
    app_producer.client = producer  # the app producer's aiokafka producer: this offline one

    async def started() -> Any:
        return app_producer

    app.maybe_start_producer = started  # type: ignore[method-assign]
    delivery = OfflineDelivery(producer)
    sender = asyncio.ensure_future(delivery.run())
    event = set_current_event()  # noqa: F841 (kept alive: Faust holds it weakly)
    best = {False: float("inf"), True: float("inf")}
    for _ in range(args.rounds):
        for held in (False, True):
            best[held] = min(best[held], await _per_record_us(app, delivery, held, args))
    sender.cancel()
    datadir.cleanup()
    print(f"per output record, best of {args.rounds} alternating rounds of {args.batches} batches")
    print(f"of {args.records} records (CPU µs, send to delivery)")
    print(f"{'at once':>10} {'with the batch':>16} {'ratio':>7}")
    print(f"{best[False]:>10.2f} {best[True]:>16.2f} {best[False] / best[True]:>6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--records", type=int, default=700)
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
