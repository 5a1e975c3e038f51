"""sends: under exactly_once, a send made for a record goes in that record's transaction.

The transaction manager is streamapp's (Faust's, with its own ``_tps_to_transactional_ids``);
around it stand-ins hold what it reads: an app under exactly_once whose assignor knows the
source topic ``events`` (group 0), a consumer that knows no partitions of the output topic (as
Faust's does not, for a topic it does not consume), and a producer that records each send.
Faust's current event is replaced by a stand-in event of a given partition.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP, FutureMessage

from streamapp.faust_compat import sends
from streamapp.runtime.driver import Transport

EVENTS_2 = TP("events", 2)


class _Assignor:
    groups = {"events": 0}

    def group_for_topic(self, topic: str) -> int:
        return self.groups[topic]

    def is_standby(self, tp: TP) -> bool:
        return False


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int | None, str | None]] = []

    async def send(
        self,
        topic: str,
        key: Any,
        value: Any,
        partition: Any,
        timestamp: Any,
        headers: Any,
        *,
        transactional_id: str | None = None,
    ) -> str:
        self.sent.append((topic, partition, transactional_id))
        return "delivery"

    async def maybe_start(self) -> None:
        pass


class _Consumer:
    def key_partition(self, topic: str, key: Any, partition: int | None) -> int | None:
        return None  # no metadata for a topic it does not consume


def _app(in_transaction: bool = True) -> Any:
    producer = _Producer()
    app = SimpleNamespace(
        conf=SimpleNamespace(id="app"),
        assignor=_Assignor(),
        in_transaction=in_transaction,
        producer=producer,
    )
    consumer = _Consumer()
    transport = SimpleNamespace(app=app)
    consumer.transactions = Transport.TransactionManager(  # type: ignore[attr-defined]
        transport, consumer=consumer, producer=producer
    )
    app.consumer = consumer

    async def maybe_start_producer() -> Any:
        return consumer.transactions if in_transaction else producer

    app.maybe_start_producer = maybe_start_producer
    return app


@pytest.fixture
def event_of(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Call with a TP (or None) to make it the partition of Faust's current event."""
    current: list[Any] = [None]
    monkeypatch.setattr(sends, "current_event", lambda: current[0])

    def set_event(tp: TP | None) -> None:
        current[0] = (
            None
            if tp is None
            else SimpleNamespace(message=SimpleNamespace(topic=tp.topic, partition=tp.partition))
        )

    yield set_event


async def test_a_send_made_for_a_record_goes_in_its_partitions_transaction(event_of: Any) -> None:
    app = _app()
    event_of(EVENTS_2)
    await app.consumer.transactions.send("out", b"k", b"v", None, None, None)
    assert app.producer.sent == [("out", None, "app-0-2")]


async def test_a_send_made_outside_any_record_is_faust_s(event_of: Any) -> None:
    app = _app()
    event_of(None)
    await app.consumer.transactions.send("out", b"k", b"v", None, None, None)
    # Faust's choice: by the destination, of which its consumer knows nothing: no transaction.
    assert app.producer.sent == [("out", None, None)]


async def test_a_record_of_no_source_topic_leaves_the_send_to_faust(event_of: Any) -> None:
    app = _app()
    event_of(TP("not-a-source", 1))
    await app.consumer.transactions.send("out", b"k", b"v", None, None, None)
    event_of(TP("<anon>", -1))  # an in-memory channel's event
    await app.consumer.transactions.send("out", b"k", b"v", None, None, None)
    assert app.producer.sent == [("out", None, None), ("out", None, None)]


async def test_a_buffered_send_is_published_in_the_transaction_of_the_record_it_was_for(
    event_of: Any,
) -> None:
    app = _app()
    fut, other = FutureMessage(SimpleNamespace()), FutureMessage(SimpleNamespace())  # type: ignore[arg-type]
    event_of(EVENTS_2)
    sends.note_source(fut)
    event_of(None)  # the producer's buffer publishes later, away from the event
    with sends.publishing_for(fut):
        await app.consumer.transactions.send("out", b"k", b"v", 3, None, None)
    with sends.publishing_for(other):
        await app.consumer.transactions.send("out", b"k", b"v", 3, None, None)
    # the second, Faust's: its consumer knows no partition of "out" (and drops the one given)
    assert app.producer.sent == [("out", 3, "app-0-2"), ("out", None, None)]
    assert sends.current_source() is None


async def test_send_for_source_joins_the_source_s_transaction_or_refuses() -> None:
    app = _app()
    assert await sends.send_for_source(app, EVENTS_2, "out", b"k", b"v") == "delivery"
    assert app.producer.sent == [("out", None, "app-0-2")]
    with pytest.raises(ValueError, match="no transaction commits"):
        await sends.send_for_source(app, TP("not-a-source", 0), "out", b"k", b"v")


async def test_send_for_source_without_transactions_uses_the_app_s_producer() -> None:
    app = _app(in_transaction=False)
    await sends.send_for_source(app, EVENTS_2, "out", b"k", b"v", headers=[("h", b"1")])
    assert app.producer.sent == [("out", None, None)]
