"""sends: under exactly_once, a send made for a record goes in that record's transaction.

The transaction manager is streamapp's (Faust's, naming each partition's transaction by its rule);
around it stand-ins hold what it reads: an app under exactly_once whose assignor knows the
source topic ``events`` (group 0), a consumer that knows no partitions of the output topic (as
Faust's does not, for a topic it does not consume), and a producer that records each send.
Faust's current event is replaced by a stand-in event of a given partition.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP, FutureMessage

from streamapp.runtime.driver import Transport
from streamapp.sending import sends

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


def test_a_partition_s_transactional_id_is_the_one_faust_s_manager_begins() -> None:
    """One rule names a source partition's transaction for sends and commits: the one Faust's
    transaction manager begins for it as the partition is assigned (its private method, called
    here to compare)."""
    from faust.transport.consumer import TransactionManager as FaustTransactionManager

    app = _app()
    app.assignor.groups = {"events": 0, "clicks": 1, "impressions": 1}
    fausts = FaustTransactionManager(
        SimpleNamespace(app=app),  # type: ignore[arg-type]
        consumer=app.consumer,
        producer=app.producer,  # type: ignore[arg-type]
    )
    tps = [TP(topic, p) for topic in ("events", "clicks", "impressions") for p in (0, 3, 11)]
    for tp in tps:
        assert {sends.transactional_id(app, tp)} == fausts._tps_to_transactional_ids({tp})
        assert sends.source_transactional_id(app, tp) == sends.transactional_id(app, tp)
    assert {sends.transactional_id(app, tp) for tp in tps} == fausts._tps_to_transactional_ids(
        set(tps)
    )
    assert sends.transactional_id(app, TP("clicks", 3)) == "app-1-3"
    # A standby partition has no transaction (Faust begins none for it), nor has a topic that
    # is no source.
    app.assignor.is_standby = lambda tp: tp == TP("clicks", 3)
    assert fausts._tps_to_transactional_ids({TP("clicks", 3)}) == set()
    assert sends.source_transactional_id(app, TP("clicks", 3)) is None
    assert sends.source_transactional_id(app, TP("not-a-source", 0)) is None
    with pytest.raises(KeyError):
        sends.transactional_id(app, TP("not-a-source", 0))


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


class _Barrier:
    """Opens once ``parties`` have arrived: a step that waits at it ends only if the others run
    beside it."""

    def __init__(self, parties: int) -> None:
        import asyncio

        self.parties, self.arrived, self.open = parties, 0, asyncio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived >= self.parties:
            self.open.set()
        await self.open.wait()


class _TransactionProducer:
    """An aiokafka transactional producer's commit steps; sending the offsets waits at the
    barrier, which only opens if every transaction of the commit is there at once."""

    def __init__(self, name: str, log: list[str], barrier: _Barrier, fenced: bool = False) -> None:
        self.name, self.log, self.barrier, self.fenced = name, log, barrier, fenced

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        self.log.append(f"{self.name} offsets {sorted(offsets.values())} {group_id}")
        await self.barrier.wait()
        if self.fenced:
            from aiokafka.errors import ProducerFenced

            raise ProducerFenced()

    async def commit_transaction(self) -> None:
        self.log.append(f"{self.name} commit")

    async def begin_transaction(self) -> None:
        self.log.append(f"{self.name} begin")


async def test_a_commit_commits_the_partitions_transactions_side_by_side(tmp_path: Path) -> None:
    import asyncio

    from streamapp import App

    app = _app()
    log: list[str] = []
    barrier = _Barrier(2)  # one after the other, the first would wait there for good
    # The app producer of a real app, holding the stand-ins as its transactions' producers.
    app_producer: Any = App("sends-commit", datadir=str(tmp_path)).producer
    app_producer._transaction_clients.update(
        {
            "app-0-1": _TransactionProducer("p1", log, barrier),
            "app-0-2": _TransactionProducer("p2", log, barrier),
        }
    )
    manager = app.consumer.transactions
    manager.producer = app_producer
    offsets = {TP("events", 1): 10, EVENTS_2: 20}
    assert await asyncio.wait_for(manager.commit(offsets), 5.0)
    committed = ["p1 offsets [10] app", "p1 commit", "p1 begin"]
    assert sorted(log) == sorted([*committed, "p2 offsets [20] app", "p2 commit", "p2 begin"])
    # A fenced producer crashes the app, as Faust's commit does, after the others committed.
    crashed: list[BaseException] = []

    async def crash(reason: BaseException) -> None:
        crashed.append(reason)

    app.crash = crash
    log.clear()
    app_producer.transaction_client("app-0-2").fenced = True
    assert not await asyncio.wait_for(manager.commit(offsets, start_new_transaction=False), 5.0)
    assert "p1 commit" in log and "p2 commit" not in log
    assert [type(reason).__name__ for reason in crashed] == ["ProducerFenced"]
    # A transaction without a producer (fenced earlier) is not committed: the commit says so,
    # after the others committed.
    log.clear()
    del app_producer._transaction_clients["app-0-2"]
    assert not await asyncio.wait_for(manager.commit(offsets), 5.0)
    assert log == ["p1 offsets [10] app", "p1 commit", "p1 begin"]
