"""What encoding a record an agent sends costs, Faust's topic and streamapp's side by side in
one process.

    .venv/bin/python -m bench.send_codecs [--calls 100000] [--rounds 5]

Per call, in µs (best of ``--rounds`` alternating rounds: on a busy machine the best is the
least disturbed): ``Topic.as_future_message``, the whole of what ``Topic.send`` does before it
hands the record to the producer (headers, key and value encoded, the pending message made),
for the throughput benchmark's output record (a str key, an int value: ``bench/apps/
throughput_app.py``), a dict value and a model. "Faust's topic" is ``faust.Topic``;
"streamapp's" is `streamapp.App`'s topic class, whose encoding takes
`streamapp.codecs.topic_codecs`. Never part of the tests.
"""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

import faust

from bench.lib.per_call import Case, best_of_rounds, print_table
from streamapp import App


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
    plain: list[tuple[str, str, Any]] = [
        ("str key, int value", "int", 12345),
        ("str key, dict value", "dict", {"clicks": 3, "campaign": "c-17"}),
        ("str key, model value", "model", Click(campaign="c-17", cost=3)),
    ]
    cases: list[Case] = [
        (
            name,
            partial(theirs[topic].as_future_message, "k1234"),
            partial(ours[topic].as_future_message, "k1234"),
            value,
        )
        for name, topic, value in plain
    ]
    best = best_of_rounds(cases, rounds=args.rounds, calls=args.calls)
    header = ("as_future_message", "Faust's topic µs", "streamapp's µs")
    print_table(best, header, rounds=args.rounds, calls=args.calls, ratio_digits=2)


if __name__ == "__main__":
    main()
