"""A rebalance's stores are opened one at a time with the event loop running between, after
their closes (a real store on disk, no broker; see `streamapp.runtime.store_opening`)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from faust.types import TP

import streamapp
from streamapp.runtime import store_handles, store_opening


@pytest.fixture
def table(tmp_path: Path) -> Any:
    app = streamapp.App("open-turns-test", datadir=str(tmp_path))
    return app.Table("counts", partitions=4)


def _changelog(table: Any, partition: int) -> TP:
    return TP(table.changelog_topic.get_topic_name(), partition)


async def test_the_stores_a_rebalance_assigns_are_opened_one_per_turn(table: Any) -> None:
    store = table.data
    store.set_persisted_offset(_changelog(table, 1), 7)  # open already: left alone
    stepped: list[int] = []
    seen: list[set[int]] = []

    def step(table: Any, tps: list[TP]) -> None:
        stepped.extend(tp.partition for tp in tps)
        store_opening.open_store(table, tps)

    done = False

    async def watch() -> None:
        while not done:
            seen.append(store.open_partitions())
            await asyncio.sleep(0)

    watcher = asyncio.ensure_future(watch())
    await asyncio.sleep(0)
    tps = {_changelog(table, p) for p in range(4)} | {TP("counts-source", 2)}
    await store_opening.one_store_a_turn(table, tps, step)
    await asyncio.sleep(0)  # the watcher sees the last open too
    done = True
    await watcher
    assert stepped == [0, 2, 3]
    assert store.open_partitions() == {0, 1, 2, 3}
    # Between two opens the loop ran other work, for several turns: every set of open stores
    # in between was seen, each more than once.
    assert [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]] == [
        {1},
        {0, 1},
        {0, 1, 2},
        {0, 1, 2, 3},
    ]
    assert all(seen.count(s) > 1 for s in ({1}, {0, 1}, {0, 1, 2}))
    assert store.persisted_offset(_changelog(table, 1)) == 7


async def test_a_store_still_closing_is_awaited_with_the_loop_running(table: Any) -> None:
    store = table.data
    store.set_persisted_offset(_changelog(table, 2), 9)
    gate = threading.Event()
    store_handles.closer.submit(gate.wait)  # holds the closer: the close below waits
    events: list[str] = []
    # Only if the loop stopped in the close (the test's failure) does this release it.
    safety = threading.Timer(10, lambda: (events.append("safety"), gate.set()))
    safety.start()
    try:
        store.revoke_partitions(table, {_changelog(table, 2)})
        opening = asyncio.ensure_future(
            store_opening.one_store_a_turn(table, {_changelog(table, 2)}, store_opening.open_store)
        )
        for _ in range(5):
            await asyncio.sleep(0)
        events.append("loop ran")
        assert not opening.done()
        gate.set()
        await opening
    finally:
        gate.set()
        safety.cancel()
    assert events == ["loop ran"]
    assert store.persisted_offset(_changelog(table, 2)) == 9
    assert 2 in store.open_partitions()
