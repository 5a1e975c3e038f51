"""What a batch agent's ``table[key] += 1`` costs, through the store's per-call path and through
`streamapp.table_writes.batch_table`, side by side in one process.

    .venv/bin/python -m bench.batch_table [--calls 5000] [--rounds 5]

Per call, in µs (best of ``--rounds`` alternating rounds: on a busy machine the best is the
least disturbed): one batch of ``n`` records, each doing the throughput benchmark's table work
(``sums[key] += 1`` on ``app.Table("sums", default=int)``, 5,000 keys in turn:
``bench/apps/throughput_app.py``), on a real RocksDB store in a temporary directory, with
Faust's monitor as the app's sensor (as in a worker) and the batch's changelog records
collected as `streamapp.batches` does (`batch_changelog`; not sent: the producer is not in
either number). "Faust's calls" is the same table with `batch_table`'s path turned off (the
store's ``get_bytes`` / ``set_bytes``, which find the partition as Faust's store does, its key
index and the sensors per call); "batch_table" is the table as streamapp makes it. Divide by
``n`` for a record. Never part of the tests.
"""

from __future__ import annotations

import argparse
import tempfile
from itertools import cycle
from typing import Any

from bench.lib.in_batch import SOURCE, set_current_event
from bench.lib.per_call import Case, best_of_rounds, print_table
from streamapp import App
from streamapp.sending import batch_changelog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    datadir = tempfile.TemporaryDirectory(prefix="bench-batch-table-")
    app = App("bench-batch-table", datadir=datadir.name, topic_partitions=6)
    app.sensors.add(app.monitor)  # what a worker adds
    sums: Any = app.Table("sums", default=int, partitions=6)
    sums._verify_source_topic_partitions = lambda topic: None  # no broker to ask
    event = set_current_event()  # noqa: F841 (kept alive: Faust holds it weakly)
    keys = cycle([f"k{i}" for i in range(5_000)])

    def batch_of(n: int, path_on: bool) -> Any:
        def one_batch(_: Any) -> None:
            sums._in_batches = path_on
            changelog = batch_changelog.begin(app, SOURCE)
            assert changelog is not None
            for _ in range(n):
                sums[next(keys)] += 1
            changelog.end_tables(finished=True)  # the batch's writes stored, as at its end
            changelog.records.clear()  # not sent: the producer is in neither number
            batch_changelog.forget()

        return one_batch

    batch_of(100, False)(None)  # the table's first read decides its path; the monitor's state
    cases: list[Case] = [
        (f"a batch of {n}", batch_of(n, False), batch_of(n, True), None) for n in (1, 16, 100)
    ]
    best = best_of_rounds(cases, rounds=args.rounds, calls=args.calls)
    header = ("table[key] += 1", "Faust's calls µs", "batch_table µs")
    print_table(best, header, rounds=args.rounds, calls=args.calls, ratio_digits=2)
    app.monitor.tables.clear()
    datadir.cleanup()


if __name__ == "__main__":
    main()
