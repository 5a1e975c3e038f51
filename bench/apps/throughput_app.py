"""The throughput benchmark's app: a per-key running sum in a changelog table, plus an output
record for every tenth input. The same agent runs under streamapp or stock Faust.

Environment (set by ``bench/throughput.py``):

- ``THROUGHPUT_ENGINE``: ``streamapp`` (a `streamapp.App`) or ``faust`` (a plain `faust.App`);
- ``THROUGHPUT_APP_ID``, ``THROUGHPUT_PARTITIONS``, ``THROUGHPUT_GUARANTEE``;
- ``THROUGHPUT_WITHOUT``: streamapp's free wins to leave out, comma-separated (``logging``,
  ``encode``, ``batching``): Faust's worker, table or producer defaults instead, to measure
  each win within one run (``bench/throughput.py --each-win``);
- ``THROUGHPUT_BATCHES``: when ``1`` (streamapp only), the agent reads its stream in batches
  (`streamapp.batches`), doing the same work per record;
- ``THROUGHPUT_RECORDS``: how many input records the run has;
- ``THROUGHPUT_PROFILE``: when set, a cProfile of the event-loop thread from the first
  record to the last is written there;
- ``THROUGHPUT_RESULT``: a file the agent writes, once the last record is processed (under
  streamapp: acked, its run's or batch's changelog records sent) and the producer flushed,
  with the wall and process CPU time of the first and the last record.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import time
from pathlib import Path
from typing import Any

import faust

ENGINE = os.environ.get("THROUGHPUT_ENGINE", "streamapp")
APP_ID = os.environ.get("THROUGHPUT_APP_ID", "bench-throughput")
PARTITIONS = int(os.environ.get("THROUGHPUT_PARTITIONS", "6"))
GUARANTEE = os.environ.get("THROUGHPUT_GUARANTEE", "at_least_once")
RECORDS = int(os.environ.get("THROUGHPUT_RECORDS", "50000"))
RESULT = Path(os.environ.get("THROUGHPUT_RESULT", "throughput-result.json"))
PROFILE = os.environ.get("THROUGHPUT_PROFILE")
OUTPUT_EVERY = 10
# The event-loop thread, first record to last (bench/throughput.py --profile).
_profiler = cProfile.Profile() if PROFILE else None

options: dict[str, Any] = {
    "topic_partitions": PARTITIONS,
    "processing_guarantee": GUARANTEE,
    "store": "rocksdb://",
}
app: faust.App
WITHOUT = {w for w in os.environ.get("THROUGHPUT_WITHOUT", "").split(",") if w}
if ENGINE == "streamapp":
    from streamapp import App

    if "logging" in WITHOUT:
        options["Worker"] = faust.Worker
    if "encode" in WITHOUT:
        options["Table"] = faust.Table
    if "batching" in WITHOUT:
        options.update(producer_linger=0.0, producer_max_batch_size=16384)
    # No standby: one worker, and the stock Faust peer keeps none either.
    app = App(APP_ID, num_standby_replicas=0, **options)
else:
    app = faust.App(APP_ID, **options)

source = app.topic(
    f"{APP_ID}-input",
    key_type=str,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=PARTITIONS,
)
output = app.topic(f"{APP_ID}-output", key_type=str, value_type=int, partitions=PARTITIONS)
sums = app.Table("sums", default=int, partitions=PARTITIONS)

_seen = 0
_finishing: list[asyncio.Future[None]] = []  # the task that writes the result, kept
_first: tuple[float, float] | None = None


def _started() -> None:
    global _first
    _first = (time.monotonic(), time.process_time())
    if _profiler is not None:
        _profiler.enable()


async def _process(key: str, value: bytes) -> None:
    """The work per input record, the same in both agents."""
    global _seen
    total = sums[key] + int(value)
    sums[key] = total
    _seen += 1
    if _seen % OUTPUT_EVERY == 0:
        await output.send(key=key, value=total)


async def _maybe_done() -> None:
    if _seen == RECORDS:
        if ENGINE == "streamapp":
            # The last records are processed once acked: a run's or a batch's table writes go
            # to the changelog as it ends, after the agent's body has seen its last record.
            _finishing.append(asyncio.ensure_future(_done_once_acked()))
        else:
            await _done()


async def _done_once_acked() -> None:
    ledger = app.consumer.ledger  # type: ignore[attr-defined]
    while ledger.pending():
        await asyncio.sleep(0.001)
    await _done()


async def _done() -> None:
    # Durable: the changelog and output records of the run are with the broker.
    await app.producer.flush()
    wall, cpu = time.monotonic(), time.process_time()
    if _profiler is not None:
        _profiler.disable()
        _profiler.dump_stats(str(PROFILE))
    RESULT.write_text(json.dumps({"records": _seen, "first": _first, "last": [wall, cpu]}))


if ENGINE == "streamapp" and os.environ.get("THROUGHPUT_BATCHES") == "1":
    from streamapp.batches import batches

    @app.agent(source)
    async def running_sum(stream: Any) -> None:
        async for batch in batches(stream):
            if _first is None:
                _started()
            for key, value in batch.items():
                await _process(key, value)
                await _maybe_done()

else:

    @app.agent(source)
    async def running_sum(stream: Any) -> None:
        async for key, value in stream.items():
            if _first is None:
                _started()
            await _process(key, value)
            await _maybe_done()
