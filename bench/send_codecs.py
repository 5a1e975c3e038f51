"""What encoding a record an agent sends costs, Faust's topic and streamapp's side by side in
one process.

    .venv/bin/python -m bench.send_codecs [--calls 100000] [--rounds 5]

Per call, in µs (best of ``--rounds`` alternating rounds: on a busy machine the best is the
least disturbed): ``Topic.as_future_message``, the whole of what ``Topic.send`` does before it
hands the record to the producer (headers, key and value encoded, the pending message made),
for the throughput benchmark's output record (a str key, an int value: ``bench/apps/
throughput_app.py``), a dict value and a model. "Faust's topic" is ``faust.Topic``;
"streamapp's" is `streamapp.App`'s topic class, whose encoding takes
`streamapp.faust_compat.send_codecs`. Never part of the tests.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import faust

from streamapp import App


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    class Click(faust.Record):  # made here: a module-level model trips the compat scan
        campaign: str
        cost: int

    app = App("bench-send-codecs")
    theirs = {
        "int": faust.Topic(app, topics=["out"], key_type=str, value_type=int),
        "dict": faust.Topic(app, topics=["out"], key_type=str),
        "model": faust.Topic(app, topics=["out"], key_type=str, value_type=Click),
    }
    ours = {
        "int": app.topic("out", key_type=str, value_type=int),
        "dict": app.topic("out", key_type=str),
        "model": app.topic("out", key_type=str, value_type=Click),
    }
    cases: list[tuple[str, str, Any]] = [
        ("str key, int value", "int", 12345),
        ("str key, dict value", "dict", {"clicks": 3, "campaign": "c-17"}),
        ("str key, model value", "model", Click(campaign="c-17", cost=3)),
    ]
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for name, topic, value in cases:
            for side, topics in (("faust", theirs), ("streamapp", ours)):
                call = partial(topics[topic].as_future_message, "k1234", value)
                us = per_call_us(call, args.calls)
                best[(name, side)] = min(best.get((name, side), us), us)
    print(f"per call, best of {args.rounds} alternating rounds of {args.calls:,} calls")
    header = ("as_future_message", "Faust's topic µs", "streamapp's µs", "ratio")
    print(f"{header[0]:<22} {header[1]:>16} {header[2]:>15} {header[3]:>7}")
    for name, *_ in cases:
        before, after = best[(name, "faust")], best[(name, "streamapp")]
        print(f"{name:<22} {before:>16.2f} {after:>15.2f} {before / after:>6.2f}x")


if __name__ == "__main__":
    main()
