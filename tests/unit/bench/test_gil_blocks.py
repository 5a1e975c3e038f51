"""bench/lib/gil_blocks: py-spy's raw stacks sorted into the blocks of a worker's run."""

from __future__ import annotations

from pathlib import Path

from bench.lib import gil_blocks

MAIN = "thread (0x1): MainThread"
AGENT = "Agent._execute_actor (faust/agents/agent.py:10)"


def _raw(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "worker.raw"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_each_stack_goes_to_the_first_block_it_matches(tmp_path: Path) -> None:
    raw = _raw(
        tmp_path,
        [
            # A send made while writing the table counts as the output records', the block
            # listed first.
            f"{MAIN};{AGENT};Table.__setitem__ (streamapp/table_writes/encode_once.py:80);"
            "Topic.send (streamapp/sending/direct_send.py:90) 3",
            f"{MAIN};{AGENT};Table.__setitem__ (streamapp/table_writes/encode_once.py:80) 5",
            f"{MAIN};{AGENT};_process (apps/throughput_app.py:88) 2",
            "thread (0x2): Thread-1;Fetcher._fetch_requests_routine (aiokafka/x.py:1) 4",
            f"{MAIN};_run_once (asyncio/base_events.py:1) 6",
            f"{MAIN};Stream._runs (streamapp/streams/stream.py:1);"
            "Run.end (streamapp/runtime/stream_runs.py:1);"
            "end (streamapp/sending/batch_changelog.py:1) 7",
            f"{MAIN};<lambda> (somewhere.py:1) 1",
            # The start and the stop are no part of it.
            f"{MAIN};<module> (<frozen importlib._bootstrap>:1) 50",
            f"{MAIN};RocksDBOptions.open (faust/stores/rocksdb.py:1) 40",
        ],
    )
    counts, other = gil_blocks.blocks(raw)
    assert counts == {
        "output records (Topic.send)": 3,
        "table write": 5,
        "the agent, rest": 2,
        "changelog records sent (batch, run)": 7,
        "the event loop, rest": 6,
        gil_blocks.CONSUMER_THREAD: 4,
    }
    assert other == 1
    summary = gil_blocks.summary(raw)
    assert "27 GIL samples while processing (1 elsewhere)" in summary
    assert "table write" in summary and "18.5%" in summary
