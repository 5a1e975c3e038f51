"""faust_compat.recovery: what recovery holds is written or dropped only where it is safe."""

from __future__ import annotations

import asyncio
import os
import threading
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from faust.tables.manager import TableManager as FaustTableManager
from faust.types import TP

from streamapp import App
from streamapp.faust_compat import recovery as recovery_module
from streamapp.faust_compat.recovery import Recovery, TableManager
from tables import store_guard
from tables.clean_shutdown import ACTIVE_MARKS_DIR


def _app(tmp_path: Path) -> Any:
    app = App("t-recovery", broker="kafka://127.0.0.1:1", datadir=str(tmp_path))
    app.Table("counts", default=int, partitions=2)
    return app


def test_a_streamapp_app_recovers_through_the_streamapp_recovery(tmp_path: Path) -> None:
    app = _app(tmp_path)
    assert isinstance(app.tables, TableManager)
    assert isinstance(app.tables.recovery, Recovery)


def test_the_changelog_queue_outlives_a_flow_resume(tmp_path: Path) -> None:
    # Faust's queue is emptied by every app.flow_control.resume(); recovery calls it while
    # standbys read, and what they had fetched was lost with their offsets moving past it.
    app = _app(tmp_path)
    queue = app.tables.changelog_queue
    queue.put_nowait("a fetched changelog record")
    app.flow_control.resume()
    assert queue.qsize() == 1


def test_a_revocation_empties_the_changelog_queue(tmp_path: Path) -> None:
    # What it holds belongs to the old assignment; the next one seeks every changelog afresh.
    app = _app(tmp_path)
    queue = app.tables.changelog_queue
    queue.put_nowait("a record of the old assignment")
    app.tables.recovery.on_partitions_revoked({TP("t-recovery-counts-changelog", 0)})
    assert queue.qsize() == 0


async def test_offsets_of_partitions_no_longer_standbys_are_dropped(tmp_path: Path) -> None:
    app = _app(tmp_path)
    recovery = app.tables.recovery
    promoted = TP("t-recovery-counts-changelog", 1)
    recovery.standby_offsets[promoted] = 41
    # Faust returns early from on_rebalance on a generation it is not at; the standby set is
    # then the one it had, here empty.
    app.consumer_generation_id = 7
    await recovery.on_rebalance(set(), set(), set(), generation_id=6)
    assert promoted not in recovery.standby_offsets


class _Store:
    def __init__(self) -> None:
        self.persisted: dict[TP, int] = {}

    def set_persisted_offset(self, tp: TP, offset: int) -> None:
        self.persisted[tp] = offset


def test_under_exactly_once_a_commit_persists_the_offsets_its_transactions_wrote(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # Faust keeps them by changelog partition and looked them up by source partition: never
    # found, no store had an offset, every restart replayed every changelog in full.
    app = App(
        "t-recovery",
        broker="kafka://127.0.0.1:1",
        datadir=str(tmp_path),
        processing_guarantee="exactly_once",
    )
    app.Table("counts", default=int, partitions=2)
    changelog = "t-recovery-counts-changelog"
    groups = {"t-recovery-events": 0, changelog: 0, "other-events": 1}
    monkeypatch.setattr(app.assignor, "group_for_topic", lambda topic: groups[topic])
    store = _Store()
    tables = app.tables
    tables.persist_offset_on_commit(store, TP(changelog, 0), 41)  # type: ignore[arg-type]
    tables.persist_offset_on_commit(store, TP(changelog, 1), 17)  # type: ignore[arg-type]

    # Another group's partition 0, and a topic no group has: not these transactions.
    tables.on_commit({TP("other-events", 0): 5, TP("unknown", 0): 3})
    assert store.persisted == {}
    tables.on_commit({TP("t-recovery-events", 0): 5})
    assert store.persisted == {TP(changelog, 0): 41}
    tables.on_commit({TP("t-recovery-events", 1): 9})
    assert store.persisted == {TP(changelog, 0): 41, TP(changelog, 1): 17}


def test_a_replay_ends_on_positions_noted_as_a_fetch_began_after_its_seek(
    tmp_path: Path,
) -> None:
    # Transport fix 17: a fetch begun after the seek whose noted position reached the end
    # offset ends the replay at once; one begun before the seek counts for nothing (its
    # positions may precede the seek).
    from streamapp.faust_compat.recovery import _Replay

    app = _app(tmp_path)
    consumer = app.consumer
    thread = consumer._thread
    ended, short_of_end = TP("t-recovery-counts-changelog", 0), TP("t-recovery-counts-changelog", 1)
    short = {ended: 120, short_of_end: 80}
    replay = _Replay(generation=1, fetches_at_seek=6)
    thread.positions_at_fetch_start = (6, {ended: 120, short_of_end: 80})
    assert Recovery._reached_as_fetch_began(consumer, short, replay) == {}
    thread.positions_at_fetch_start = (7, {ended: 120, short_of_end: 79})
    assert Recovery._reached_as_fetch_began(consumer, short, replay) == {ended: 120}


class _Consumer:
    def __init__(self) -> None:
        self.resumed: set[TP] = set()

    def resume_partitions(self, tps: set[TP]) -> None:
        self.resumed |= set(tps)


def test_an_incremental_rebalance_that_gains_nothing_still_seeks_and_resumes_its_standbys(
    tmp_path: Path,
) -> None:
    # Faust's table manager pauses every changelog partition as a rebalance begins and leaves
    # the standbys to the recovery that follows (which seeks them to their offsets, then
    # resumes them). An incremental rebalance that gained nothing ran none: its standbys (and
    # warmups) stayed paused, replicating nothing; records the fetch loop was handing out as
    # the pause came were dropped past aiokafka's position, so a bare resume skipped them.
    app = _app(tmp_path)
    recovery = app.tables.recovery
    kept = TP("t-recovery-counts-changelog", 1)
    table = app.tables._changelogs[kept.topic]
    recovery.add_standby(table, kept)
    assignor: Any = type(
        "Assignor",
        (),
        {
            "incremental_join": True,
            "assigned_standbys": lambda self: {kept},
            "assigned_actives": lambda self: set(),
        },
    )()
    recovery.app = SimpleNamespace(assignor=assignor, consumer=_Consumer())
    recovery._on_rebalance_incrementally(set(), generation_id=3)
    assert recovery.signal_recovery_start.is_set()
    assert recovery.incremental_pass
    assert recovery.standby_tps == {kept}


class _ReplicatingConsumer:
    """Answers offsets while recovery takes a standby's records (one per request)."""

    def __init__(self, destination: Any, tp: TP, log_start: int) -> None:
        self.destination = destination
        self.tp = tp
        self.log_start = log_start

    async def highwaters(self, *tps: TP) -> dict[TP, int]:
        return dict.fromkeys(tps, 2000)

    async def earliest_offsets(self, *tps: TP) -> dict[TP, int]:
        self.destination[self.tp] += 1  # a record taken from the changelog queue meanwhile
        return dict.fromkeys(tps, self.log_start)


async def test_a_standby_replicating_while_its_offsets_are_built_is_not_taken_for_trimmed(
    tmp_path: Path,
) -> None:
    # Under the cooperative protocol recovery takes the records of the standbys it keeps
    # while it builds their offsets: the offset it advanced passed for a moved log start, and
    # the store was set aside (its replay then began past every record it had lost).
    app = _app(tmp_path)
    recovery = app.tables.recovery
    tp = TP("t-recovery-counts-changelog", 1)
    destination: Counter[TP] = Counter({tp: 1035})
    rebuilt: list[TP] = []
    recovery._rebuild_trimmed = lambda tp, persisted, start: rebuilt.append(tp)  # type: ignore[method-assign]
    consumer: Any = _ReplicatingConsumer(destination, tp, log_start=0)
    await recovery._build_offsets(consumer, {tp}, destination, "standby")
    assert not rebuilt
    assert destination[tp] >= 1035


async def test_a_store_whose_records_were_deleted_is_rebuilt_from_the_log_start(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path)
    recovery = app.tables.recovery
    tp = TP("t-recovery-counts-changelog", 1)
    destination: Counter[TP] = Counter({tp: 100})
    rebuilt: list[TP] = []
    recovery._rebuild_trimmed = lambda tp, persisted, start: rebuilt.append(tp)  # type: ignore[method-assign]
    consumer: Any = _ReplicatingConsumer(destination, tp, log_start=500)
    await recovery._build_offsets(consumer, {tp}, destination, "standby")
    assert rebuilt == [tp]
    assert destination[tp] == 499  # replayed from the log start, as for an empty store


class _RecreatedChangelogConsumer:
    """A changelog deleted and created again (empty) after the standbys' offsets were built."""

    def __init__(self) -> None:
        self.sought: list[dict[TP, int]] = []

    async def highwaters(self, *tps: TP) -> dict[TP, int]:
        return dict.fromkeys(tps, 0)  # the new topic's end: nothing in it

    async def seek_wait(self, offsets: dict[TP, int]) -> None:
        self.sought.append(dict(offsets))


async def test_a_standby_whose_changelog_was_recreated_mid_recovery_is_rebuilt_not_crashed(
    tmp_path: Path,
) -> None:
    # Faust checks the standbys against highwaters it builds after seeking them and raised
    # ConsistencyError (the worker crashed) for a store whose changelog had been deleted and
    # created again since their offsets were built (test_changelog_deleted, in one CI run).
    app = _app(tmp_path)
    recovery = app.tables.recovery
    beyond, fine = TP("t-recovery-counts-changelog", 0), TP("t-recovery-counts-changelog", 1)
    recovery.standby_offsets.update({beyond: 29, fine: -1})
    rebuilt: list[TP] = []
    recovery._rebuild = lambda tp, persisted, highwater: rebuilt.append(tp)  # type: ignore[method-assign]
    consumer: Any = _RecreatedChangelogConsumer()
    highwaters: Counter[TP] = Counter()
    await recovery._build_highwaters(consumer, {beyond, fine}, highwaters, "standby")
    assert rebuilt == [beyond]
    assert recovery.standby_offsets[beyond] == -1  # replayed from the start, as an empty store
    assert consumer.sought == [{beyond: 0}]
    # Faust's check that follows (an offset above its highwater raises) finds nothing.
    assert all(recovery.standby_offsets[tp] <= highwaters[tp] for tp in (beyond, fine))


async def test_recovery_takes_no_record_of_a_partition_it_no_longer_has(tmp_path: Path) -> None:
    # An incremental rebalance keeps the queue (the kept standbys' records): the records of a
    # changelog partition given up were taken after it, and Faust's loop applied them with
    # the table and offsets of the record before ("recovery unknown topic").
    app = _app(tmp_path)
    recovery = app.tables.recovery
    kept, lost = TP("t-recovery-counts-changelog", 0), TP("t-recovery-counts-changelog", 1)
    recovery.standby_tps.add(kept)
    queue = app.tables.changelog_queue
    for tp, offset in ((lost, 7), (kept, 3), (lost, 8), (kept, 4)):
        queue.put_nowait(SimpleNamespace(message=SimpleNamespace(tp=tp, offset=offset)))
    taken = [(e.message.tp, e.message.offset) for e in (await queue.get(), await queue.get())]
    assert taken == [(kept, 3), (kept, 4)]
    assert queue.empty()


def test_a_standby_promoted_incrementally_recovers_from_the_records_it_had_taken(
    tmp_path: Path,
) -> None:
    # Recovery takes a standby's records into a buffer written every standby_buffer_size
    # (1000) records. An eager rebalance writes it as it revokes; an incremental one that
    # revokes nothing did not, and the promoted partition's replay began at the store's older
    # offset: up to 999 records replayed again, beyond the acceptable recovery lag.
    app = _app(tmp_path)
    recovery = app.tables.recovery
    promoted = TP("t-recovery-counts-changelog", 1)
    table = app.tables._changelogs[promoted.topic]
    recovery.add_standby(table, promoted)
    for offset in range(5):
        message = SimpleNamespace(
            tp=promoted, partition=1, offset=offset, key=b'"k"', value=str(offset).encode()
        )
        recovery.buffers[table].append(SimpleNamespace(message=message))
        recovery.standby_offsets[promoted] = offset
    assignor: Any = type(
        "Assignor",
        (),
        {
            "incremental_join": True,
            "assigned_standbys": lambda self: set(),
            "assigned_actives": lambda self: {promoted},
        },
    )()
    recovery.app = SimpleNamespace(assignor=assignor, consumer=_Consumer())
    recovery._on_rebalance_incrementally(set(), generation_id=3)
    assert recovery.active_offsets[promoted] == 4  # replays from the record after those taken
    assert table.persisted_offset(promoted) == 4  # and the store holds them (never ahead)


async def test_a_completion_that_comes_after_the_next_rebalance_began_leaves_its_state_alone(
    tmp_path: Path,
) -> None:
    # Faust's loop runs the completion inside a wait that cancels it at its first await once
    # the next rebalance has begun, but what came before that await took the new pass's
    # `incremental_pass` (the new pass then completed Faust's eager way, seeking every stream
    # partition back: records of kept partitions processed twice) and counted the new gained
    # actives as recovered before their replay.
    app = _app(tmp_path)
    recovery = app.tables.recovery
    gained = TP("t-recovery-counts-changelog", 1)
    table = app.tables._changelogs[gained.topic]
    recovery.add_active(table, gained)  # the new rebalance's, not replayed yet
    recovery.incremental_pass = True
    recovery.signal_recovery_start.set()
    await recovery._on_recovery_completed(generation_id=3)
    assert recovery.incremental_pass
    assert gained not in recovery._settled_actives


async def test_a_rebalance_opens_an_active_store_only_once_its_mark_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under exactly_once a store with a mark is discarded after a crash, so the mark must be
    # durable before agents can write to the store. Its fsyncs run on a thread: the rebalance
    # must still wait for them before anything opens the store.
    app = _app(tmp_path)
    manager = app.tables
    table = manager["counts"]
    active = TP(store_guard.changelog_topic(table), 1)
    events: list[str] = []
    in_fsync, release = asyncio.Event(), threading.Event()
    loop = asyncio.get_running_loop()
    real_fsync = os.fsync

    def held_fsync(fd: int) -> None:
        loop.call_soon_threadsafe(in_fsync.set)
        release.wait(timeout=10)  # only keeps a regression from hanging the suite
        real_fsync(fd)
        events.append("synced " + Path(os.readlink(f"/proc/self/fd/{fd}")).name)

    def noting_open(table: Any, tps: list[TP]) -> None:
        events.append(f"open {tps[0].partition}")
        real_open(table, tps)

    async def faust_on_rebalance(*args: Any) -> None:
        events.append("faust's on_rebalance")

    real_open = recovery_module._open_store
    monkeypatch.setattr(os, "fsync", held_fsync)
    monkeypatch.setattr(recovery_module, "_open_store", noting_open)
    monkeypatch.setattr(FaustTableManager, "on_rebalance", faust_on_rebalance)
    assignor = SimpleNamespace(assigned_actives=lambda: {active}, assigned_standbys=set)
    manager.app = SimpleNamespace(
        assignor=assignor, consumer=SimpleNamespace(topic_partitions=lambda topic: 2)
    )

    async def other_work() -> None:
        await in_fsync.wait()
        events.append("other work")
        # Time for a rebalance that did not wait for its marks to reach its opens (it pauses
        # PAUSE_BETWEEN_OPENS before each); one that waits does whatever the time.
        await asyncio.sleep(5 * recovery_module.PAUSE_BETWEEN_OPENS)
        release.set()

    other = asyncio.create_task(other_work())
    await manager.on_rebalance({active}, set(), {active}, generation_id=3)
    await other
    assert events == [
        "other work",
        "synced counts-1.db.active",
        "synced " + ACTIVE_MARKS_DIR,
        "open 1",
        "faust's on_rebalance",
    ]
