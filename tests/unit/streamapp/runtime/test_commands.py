"""Work other tasks hand the fetch loop: run in order, in the loop's task, between its rounds
(`streamapp.runtime.commands`)."""

from __future__ import annotations

import asyncio

import pytest

from streamapp.runtime.commands import Commands


async def test_commands_run_in_the_loops_task_in_order_and_return_their_results() -> None:
    commands = Commands()
    commands.taking = True
    ran: list[tuple[str, asyncio.Task[object] | None]] = []

    def step(name: str) -> object:
        async def run() -> str:
            ran.append((name, asyncio.current_task()))
            return name

        return run

    first = asyncio.ensure_future(commands.run(step("revoke")))
    second = asyncio.ensure_future(commands.run(step("assign")))
    await asyncio.sleep(0)
    assert commands.pending.is_set() and ran == []  # nothing runs until the loop takes them
    loop_task = asyncio.ensure_future(commands.run_queued())
    await loop_task
    assert [name for name, _ in ran] == ["revoke", "assign"]
    assert {task for _, task in ran} == {loop_task}
    assert await first == "revoke" and await second == "assign"
    assert not commands.pending.is_set()


async def test_a_command_that_raises_raises_in_its_caller_and_the_next_still_runs() -> None:
    commands = Commands()
    commands.taking = True

    async def fails() -> None:
        raise ValueError("no such partition")

    async def works() -> int:
        return 1

    failing = asyncio.ensure_future(commands.run(fails))
    working = asyncio.ensure_future(commands.run(works))
    await asyncio.sleep(0)
    await commands.run_queued()
    with pytest.raises(ValueError, match="no such partition"):
        await failing
    assert await working == 1


async def test_without_a_running_loop_a_command_runs_in_its_caller() -> None:
    commands = Commands()

    async def here() -> asyncio.Task[object] | None:
        return asyncio.current_task()

    assert await commands.run(here) is asyncio.current_task()


async def test_stopping_runs_what_is_queued_and_later_commands_run_at_once() -> None:
    commands = Commands()
    commands.taking = True
    ran: list[str] = []

    async def queued() -> None:
        ran.append("queued")

    waiting = asyncio.ensure_future(commands.run(queued))
    await asyncio.sleep(0)
    await commands.stop_taking()
    await waiting
    assert ran == ["queued"]

    async def later() -> None:
        ran.append("later")

    await commands.run(later)
    assert ran == ["queued", "later"]


async def test_a_submitted_command_runs_with_the_next_round() -> None:
    commands = Commands()
    commands.taking = True
    ran: list[str] = []

    async def rewind() -> None:
        ran.append("rewind")

    commands.submit(rewind)
    assert commands.pending.is_set() and ran == []
    await commands.run_queued()
    assert ran == ["rewind"]
