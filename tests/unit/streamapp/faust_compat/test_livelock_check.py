"""transport.ConsumerThread.verify_event_path: a partition without a position yet is skipped.

Faust's livelock check reads aiokafka's ``TopicPartitionState.position``, which asserts there is
one; a partition awaiting an offset reset has none for a moment, and the check crashed the
worker (``AssertionError: assert self._position is not None``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.consumer.subscription_state import SubscriptionState
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from streamapp.faust_compat.transport import ConsumerThread

STREAM = TP("clicks", 0)


def _thread(subscription: SubscriptionState) -> Any:
    thread: Any = object.__new__(ConsumerThread)
    thread._ensure_consumer = lambda: SimpleNamespace(_subscription=subscription)
    return thread


@pytest.fixture
def verified(monkeypatch: pytest.MonkeyPatch) -> list[TP]:
    seen: list[TP] = []
    monkeypatch.setattr(
        faust_aiokafka.AIOKafkaConsumerThread,
        "verify_event_path",
        lambda self, now, tp: seen.append(tp),
    )
    return seen


async def test_a_partition_awaiting_an_offset_reset_is_not_verified(verified: list[TP]) -> None:
    subscription = SubscriptionState()
    subscription.assign_from_user([TopicPartition(STREAM.topic, STREAM.partition)])
    state = subscription.subscription.assignment.state_value(
        TopicPartition(STREAM.topic, STREAM.partition)
    )
    with pytest.raises(AssertionError):
        state.position  # what Faust's check read  # noqa: B018
    assert _thread(subscription).verify_event_path(10.0, STREAM) is None
    assert verified == []


async def test_a_partition_with_a_position_is_verified_as_faust_does(verified: list[TP]) -> None:
    subscription = SubscriptionState()
    tp = TopicPartition(STREAM.topic, STREAM.partition)
    subscription.assign_from_user([tp])
    subscription.seek(tp, 42)
    _thread(subscription).verify_event_path(10.0, STREAM)
    assert verified == [STREAM]


async def test_no_subscription_no_verification(verified: list[TP]) -> None:
    assert _thread(SubscriptionState()).verify_event_path(10.0, STREAM) is None
    assert verified == []
