"""What a replay (a recovery, a standby, a warmup) costs per changelog record: Faust's path
(each record decoded into an event, the events applied through the table) and the raw path
(`streamapp.runtime.changelog_apply`: each key and value checked, the bytes written as they came),
side by side in one process, without a broker.

    .venv/bin/python -m bench.changelog_replay [--records 1000] [--batches 50] [--rounds 5]

A `streamapp.App` that never starts, a table on streamapp's RocksDB store in a temporary
directory, and batches of ``--records`` changelog records (aiokafka's ``ConsumerRecord``, as the
fetch loop takes them) applied by the table manager's ``apply_records``, the call the fetch
loop makes. Per record, in µs, best of ``--rounds`` alternating rounds of ``--batches`` batches
(on a busy machine the best is the least disturbed): a counts table (``default=int``: json
keys and int values), a table of json objects, and a table of raw bytes. Never part of the
tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import ConsumerRecord
from faust.types import TP

from bench.lib.per_call import print_table
from streamapp import App
from streamapp.runtime.changelog_apply import RawChangelog

#: Where `RawChangelog.of` keeps its decision on a table: None there is Faust's path.
_KEPT_AS = "_streamapp_raw_changelog"


def _records(topic: str, count: int, value: Any) -> list[Any]:
    return [
        ConsumerRecord(topic, 0, i, 1000, 0, json.dumps(f"k{i}").encode(), value(i), None, 8, 8, [])
        for i in range(count)
    ]


async def _per_record_us(app: Any, table: Any, records: list[Any], batches: int) -> float:
    tp = TP(table.changelog_topic.get_topic_name(), 0)
    apply_records = app.tables.apply_records
    recovery = app.tables.recovery
    start = time.perf_counter()
    for _ in range(batches):
        recovery.forget([tp])  # each batch from offset 0 again: no "went back" rebuild
        await apply_records(tp, records)
    return (time.perf_counter() - start) / (batches * len(records)) * 1e6


async def run(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        app = App("bench-replay", num_standby_replicas=0, datadir=str(Path(tmp)))
        cases = {
            "counts (json key, int)": (
                app.Table("counts", default=int, partitions=1),
                lambda i: str(i).encode(),
            ),
            "json objects": (
                app.Table("objects", partitions=1),
                lambda i: json.dumps({"clicks": i, "campaign": f"c-{i % 17}"}).encode(),
            ),
            "raw bytes": (
                app.Table("raw", key_type=bytes, value_type=bytes, partitions=1),
                lambda i: b"v%d" % i,
            ),
        }
        best: dict[str, list[float]] = {name: [float("inf")] * 2 for name in cases}
        for _ in range(args.rounds):
            for name, (table, value) in cases.items():
                records = _records(table.changelog_topic.get_topic_name(), args.records, value)
                raw = RawChangelog.for_table(table)
                assert raw is not None, name
                for side, decision in enumerate((None, raw)):
                    table.__dict__[_KEPT_AS] = decision
                    took = await _per_record_us(app, table, records, args.batches)
                    best[name][side] = min(best[name][side], took)
        for table, _ in cases.values():
            table.data.handles.close_all()
        return {name: (sides[0], sides[1]) for name, sides in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1000, help="records per batch")
    parser.add_argument("--batches", type=int, default=50, help="batches per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    best = asyncio.run(run(args))
    header = ("table", "Faust's path µs", "raw path µs")
    print_table(best, header, rounds=args.rounds, calls=args.records * args.batches, ratio_digits=1)


if __name__ == "__main__":
    main()
