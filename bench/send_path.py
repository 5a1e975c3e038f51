"""What ``Topic.send`` costs up to the producer, through Faust's layers and through
`streamapp.sending.direct_send`, side by side in one process.

    .venv/bin/python -m bench.send_path [--calls 50000] [--rounds 5]

Per call, in µs (best of ``--rounds`` alternating rounds: on a busy machine the best is the
least disturbed): one ``Topic.send`` of the throughput benchmark's output record (a str key,
an int value: ``bench/apps/throughput_app.py``) on `streamapp.App`'s topic, to a producer
that does nothing but return a future (aiokafka's own ``send`` is not in either number).
"Faust's layers" is the same topic's send as before `direct_send` (``Topic.send``,
``_send_now``, streamapp's and Faust's ``publish_message``, ``_get_producer``; the encoding is
`send_codecs`' on both sides); "direct" is `direct_send.Topic.send`. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Coroutine
from functools import partial
from typing import Any

from bench.lib.per_call import Case, best_of_rounds, print_table
from streamapp import App
from streamapp.codecs import topic_codecs as send_codecs


class NullProducer:
    """Hands back a future, as aiokafka's ``send`` does once the record is in its batch."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    async def send(self, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        return self.loop.create_future()


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Runs a coroutine that never waits, without an event-loop iteration."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the send waited")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    loop = asyncio.new_event_loop()
    app = App("bench-send-path", num_standby_replicas=0)
    producer = NullProducer(loop)

    async def maybe_start_producer() -> Any:
        return producer

    app.maybe_start_producer = maybe_start_producer  # type: ignore[method-assign]
    topic = app.topic("out", key_type=str, value_type=int)
    layered = partial(send_codecs.Topic.send, topic, key="k1234")  # Faust's Topic.send
    direct = partial(topic.send, key="k1234")

    def through_layers(value: int) -> Any:
        return run(layered(value=value))

    def through_direct(value: int) -> Any:
        return run(direct(value=value))

    cases: list[Case] = [("str key, int value", through_layers, through_direct, 12345)]
    best = best_of_rounds(cases, rounds=args.rounds, calls=args.calls)
    print_table(
        best,
        ("Topic.send", "Faust's layers µs", "direct µs"),
        rounds=args.rounds,
        calls=args.calls,
        ratio_digits=2,
    )
    loop.close()


if __name__ == "__main__":
    main()
