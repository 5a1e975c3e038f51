"""``bench/adclick.py --keep``: the run's data dir stays, and its worker logs are named."""

from __future__ import annotations

from pathlib import Path

from bench.adclick import kept_logs


def test_a_kept_run_names_each_worker_s_log_and_no_broker_segment(tmp_path: Path) -> None:
    throughput = tmp_path / "bench-worker-1.log"  # beside the worker's data dir w1
    scale_out = tmp_path / "cooperative" / "bench-worker-4.log"
    segment = tmp_path / "kafka" / "bench-x-clicks-0" / "00000000000000000000.log"
    for path in (throughput, scale_out, segment):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    said = kept_logs(tmp_path)
    assert said.splitlines() == [
        f"kept {tmp_path}; worker logs:",
        f"  {throughput}",
        f"  {scale_out}",
    ]


def test_a_kept_run_that_started_no_worker_says_so(tmp_path: Path) -> None:
    assert kept_logs(tmp_path) == f"kept {tmp_path}; worker logs: (no worker was started)"
