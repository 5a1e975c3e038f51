"""Reconcile the streaming join's output against Spark's batch join of the raw topics.

    python -m examples.adclick.spark.reconcile --bootstrap 127.0.0.1:9092 --out reports/adclick

Prints one summary line and writes reconciliation.json, reconciliation.md and
ctr_per_campaign.png into ``--out``. Exits 1 when attributions are missing,
mismatched or unexpected (duplicates are reported, and only fail with
``--strict``, since at-least-once processing may legitimately repeat output).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from examples.adclick.spark.reference import Reconciliation, reconcile
from examples.adclick.spark.report import write_report
from examples.adclick.spark.session import spark_session
from examples.adclick.topology import Topology


def run_reconciliation(
    bootstrap: str, topology: Topology, out_dir: Path, extra: dict[str, Any] | None = None
) -> tuple[Reconciliation, dict[str, Path]]:
    started = time.monotonic()
    # Spark's own output (Ivy's resolution, its log) goes to a file of the report.
    spark_log = out_dir / "spark.log"
    spark = spark_session("adclick-reconcile", log_file=spark_log)
    try:
        result = reconcile(
            spark,
            bootstrap,
            {
                "impressions": topology.impressions,
                "clicks": topology.clicks,
                "attributed": topology.attributed,
            },
            topology.window_ms,
        )
    finally:
        spark.stop()
    info = {**(extra or {}), "spark_seconds": round(time.monotonic() - started, 1)}
    return result, {**write_report(result, out_dir, info), "spark_log": spark_log}


def summary_line(r: Reconciliation) -> str:
    return (
        f"reconcile: {r.expected} expected, {r.joined} joined, {r.missing} missing, "
        f"{r.duplicated} duplicated, {r.mismatched} mismatched, {r.unexpected} unexpected"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.adclick.spark.reconcile")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--prefix", help="topic name prefix (default: $ADCLICK_PREFIX)")
    parser.add_argument("--out", type=Path, default=Path("reports/adclick"))
    parser.add_argument("--strict", action="store_true", help="fail on duplicates too")
    args = parser.parse_args(argv)
    topology = Topology.from_env()
    if args.prefix is not None:
        topology = replace(topology, prefix=args.prefix)
    result, paths = run_reconciliation(args.bootstrap, topology, args.out)
    print(summary_line(result))
    print(
        f"reconcile: report in {paths['markdown']}, Spark's log in {paths['spark_log']}",
        file=sys.stderr,
    )
    failed = not result.ok or (args.strict and result.duplicated > 0)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
