"""Where a worker's CPU goes by block of the run, from py-spy's GIL samples
(``bench/throughput.py --py-spy DIR``).

py-spy (not a project dependency: install it where you like and pass its path) samples every
thread of the worker that holds the GIL, so a thread waiting in a system call or for the GIL
is not counted. Samples of the start and the stop (imports, RocksDB's open and close) are left
out; the rest is sorted into the blocks below by the first of their patterns found in the
stack, and shown as shares of the samples taken while records were processed
(docs/performance.md).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

#: Block -> patterns of a frame ("function (file)"); the first block matching a stack takes it.
BLOCKS: list[tuple[str, tuple[str, ...]]] = [
    ("output records (Topic.send)", ("Topic.send (faust/topics.py)", "Topic.send (streamapp/")),
    (
        "changelog records sent (batch, run)",
        ("end (streamapp/sending/batch_changelog.py)",),
    ),
    ("table read", ("Table.__getitem__ (streamapp/table_writes/encode_once.py)",)),
    ("table write", ("Table.__setitem__ (streamapp/table_writes/encode_once.py)",)),
    (
        "records taken off the queue",
        ("_take (streamapp/batches.py)", "take (streamapp/runtime/stream_runs.py)"),
    ),
    (
        "acks (batch, run)",
        ("ack_batch (streamapp/runtime/consumer.py)", "ack (streamapp/runtime/stream_runs.py)"),
    ),
    (
        "the stream's iteration, rest",
        ("Stream._runs (streamapp/streams/stream.py)", "Stream._py_aiter (faust/streams.py)"),
    ),
    ("hand-out (fetch loop)", ("FetchLoop._hand_out (streamapp/runtime/loop.py)",)),
    ("fetch loop, rest", ("FetchLoop._round (streamapp/runtime/loop.py)",)),
    ("Faust's conductor, rest", ("on_message (faust/transport/conductor.py)",)),
    ("the agent, rest", ("Agent._execute_actor (faust/agents/agent.py)",)),
    ("the producer's sender", ("(aiokafka/producer/sender.py)",)),
    # Last: the loop's own work between callbacks (selecting, scheduling, timers).
    ("the event loop, rest", ("_run_once (asyncio/base_events.py)",)),
]
CONSUMER_THREAD = "the consumer's thread"
#: Frames of a worker's start and stop, not counted.
NOT_PROCESSING = ("(<frozen importlib", "RocksDBOptions.open (", "Store.stop (")

_LINE = re.compile(r":\d+\)")


def blocks(raw: Path) -> tuple[Counter[str], int]:
    """Samples per block of py-spy's raw output (``-f raw --threads``), and those in none."""
    counts: Counter[str] = Counter()
    other = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        frames = [_LINE.sub(")", f) for f in stack.split(";")]
        if any(p in f for f in frames for p in NOT_PROCESSING):
            continue
        if "MainThread" not in frames[0]:  # Faust's consumer runs in a thread of its own
            counts[CONSUMER_THREAD] += int(n)
            continue
        block = next(
            (name for name, pats in BLOCKS if any(p in f for f in frames for p in pats)), None
        )
        if block is None:
            other += int(n)
        else:
            counts[block] += int(n)
    return counts, other


def summary(raw: Path) -> str:
    counts, other = blocks(raw)
    total = sum(counts.values()) or 1
    lines = [f"py-spy {raw.name}: {total} GIL samples while processing ({other} elsewhere)"]
    for name in [*(name for name, _ in BLOCKS), CONSUMER_THREAD]:
        lines.append(f"  {name:36s} {100 * counts[name] / total:5.1f}%")
    return "\n".join(lines)
