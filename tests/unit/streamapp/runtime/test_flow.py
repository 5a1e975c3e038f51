"""The app's flow control: a clear hands what it drops to the consumer, so that nothing
dropped unprocessed is lost (`streamapp.runtime.flow`)."""

from __future__ import annotations

from typing import Any

from mode.utils.queues import FlowControlQueue

from streamapp.runtime.flow import FlowControl


async def test_a_clear_empties_the_queues_and_says_what_it_took() -> None:
    flow = FlowControl()
    flow.resume()
    taken: list[Any] = []
    flow.on_dropped = lambda events, flowing: taken.extend(events) if flowing else None
    first: FlowControlQueue[str] = FlowControlQueue(flow_control=flow, clear_on_resume=True)
    second: FlowControlQueue[str] = FlowControlQueue(flow_control=flow, clear_on_resume=True)
    unmanaged: FlowControlQueue[str] = FlowControlQueue(flow_control=flow)
    for value in ("a", "b"):
        first.put_nowait(value)
    second.put_nowait("c")
    unmanaged.put_nowait("kept")
    flow.clear()
    assert sorted(taken) == ["a", "b", "c"]
    assert first.empty() and second.empty()
    assert unmanaged.qsize() == 1


async def test_a_resume_hands_what_it_clears_to_the_consumer_too() -> None:
    flow = FlowControl()
    taken: list[Any] = []
    flow.on_dropped = lambda events, flowing: taken.extend(events) if flowing else None
    queue: FlowControlQueue[str] = FlowControlQueue(flow_control=flow, clear_on_resume=True)
    queue.put_nowait("queued")
    flow.resume()
    assert taken == ["queued"]
    assert flow.is_active()


async def test_a_clear_of_empty_queues_says_nothing() -> None:
    flow = FlowControl()
    calls: list[Any] = []
    flow.on_dropped = lambda events, flowing: calls.append((events, flowing))
    FlowControlQueue(flow_control=flow, clear_on_resume=True)
    flow.clear()
    assert calls == []


async def test_a_clear_as_the_worker_stops_says_the_flow_is_suspended() -> None:
    """The flow is suspended first: what is dropped is processed after the restart, not sent
    back now."""
    flow = FlowControl()
    flow.resume()
    calls: list[Any] = []
    flow.on_dropped = lambda events, flowing: calls.append((events, flowing))
    queue: FlowControlQueue[str] = FlowControlQueue(flow_control=flow, clear_on_resume=True)
    queue.put_nowait("queued")
    flow.suspend()
    flow.clear()
    assert calls == [(["queued"], False)] and queue.empty()
