"""Faust's rebalance handling made incremental under the cooperative protocol
(streamapp.faust_compat.incremental): the steps a worker's consumer and app go through.

What a real group does through them (kept partitions never paused, sought back or processed
twice; gained ones resumed; nothing lost) is tested on a real broker in
tests/integration/test_cooperative_rebalance.py.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from streamapp.faust_compat import incremental
from streamapp.faust_compat.transport import Consumer
from streamapp.partition_assignor import StreamappPartitionAssignor

KEPT = TP("events", 0)
GAINED = TP("events", 1)
CHANGELOG = TP("app-latest-changelog", 1)


def _consumer_after_an_eager_rebalance_that_sought_nothing() -> Any:
    # A worker's first rebalance gave it no stream partition: Faust's recovery resumed none,
    # so its seek released none, and the consumer still waited for a recovery seek.
    consumer: Any = object.__new__(Consumer)
    consumer.app = SimpleNamespace(tables=SimpleNamespace(changelog_topics={CHANGELOG.topic}))
    consumer._active_partitions = {KEPT}
    consumer._paused_partitions = set()
    consumer._buffered_partitions = set()
    consumer._streams_await_seek = True
    consumer._sought_for_streams = False
    consumer._resume_after_seek = set()
    return consumer


def test_a_gained_partition_waits_paused_then_resumes() -> None:
    consumer = _consumer_after_an_eager_rebalance_that_sought_nothing()
    consumer.prepare_incremental_assignment({GAINED, CHANGELOG})
    # Faust's assignment step: every partition assigned and not paused becomes active.
    consumer._set_active_tps({KEPT, GAINED, CHANGELOG})
    assert consumer._active_partitions == {KEPT}
    # Its tables recovered (recovery resumes the changelog), `incremental` resumes it.
    consumer.resume_partitions({CHANGELOG})
    consumer.resume_partitions({GAINED})
    assert consumer._active_partitions == {KEPT, GAINED, CHANGELOG}
    assert not consumer._resume_after_seek


def test_without_the_preparation_the_resume_was_held_for_good() -> None:
    # The scale-out's lost records: the gained stream partition's resume waited for a seek of
    # Faust's recovery that an incremental rebalance never runs.
    consumer = _consumer_after_an_eager_rebalance_that_sought_nothing()
    consumer.pause_partitions({GAINED})
    consumer.resume_partitions({GAINED})
    assert GAINED not in consumer._active_partitions
    assert consumer._resume_after_seek == {GAINED}


def _assignor(app: Any) -> Any:
    assignor: Any = object.__new__(StreamappPartitionAssignor)
    assignor.app = app
    assignor.incremental_join = False
    return assignor


def test_a_cooperative_join_goes_incremental_once_no_eager_recovery_is_under_way() -> None:
    app = SimpleNamespace()
    assignor = _assignor(app)
    app.assignor = assignor
    incremental.handler(app).eager_pending = True
    # Faust paused every partition for that recovery and resumes them only as it ends.
    assignor.on_incremental_join(True)
    assert not incremental.incremental_join(app)
    assignor.on_incremental_join(False)
    incremental.handler(app).eager_pending = False
    assignor.on_incremental_join(True)
    assert incremental.incremental_join(app)
    # Decided for the join's two handler calls: an eager recovery ending between them
    # changes nothing.
    incremental.handler(app).eager_pending = True
    assert incremental.incremental_join(app)
    assignor.on_incremental_join(False)
    assert not incremental.incremental_join(app)


class _Signal:
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    async def send(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(self.name)


def _app(calls: list[str]) -> Any:
    async def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    consumer = SimpleNamespace(
        pause_partitions=lambda tps: calls.append(f"pause {sorted(tps)}"),
        resume_partitions=lambda tps: calls.append(f"resume {sorted(tps)}"),
        assignment=lambda: {KEPT},
        resume_flow=lambda: calls.append("resume_flow"),
    )
    tables = SimpleNamespace(
        changelog_topics={CHANGELOG.topic},
        on_rebalance=nothing,
        recovery=SimpleNamespace(incremental_pass=False),
        on_actives_ready=lambda: calls.append("actives_ready"),
        on_standbys_ready=lambda: None,
    )
    return SimpleNamespace(
        consumer=consumer,
        tables=tables,
        agents=SimpleNamespace(on_rebalance=nothing),
        topics=SimpleNamespace(
            maybe_wait_for_subscriptions=nothing, on_partitions_assigned=nothing
        ),
        flow_control=None,
        in_transaction=False,
        consumer_generation_id=4,
        on_partitions_assigned=_Signal("assigned", calls),
        on_rebalance_complete=_Signal("complete", calls),
        on_rebalance_end=lambda: calls.append("end"),
    )


async def test_a_rebalance_with_nothing_to_recover_ends_after_faust_s_return_step() -> None:
    # Faust's consumer marks the return from the assignment step for the app's sensors
    # (app.on_rebalance_return) after the step; ended before, the sensors had no state left
    # for it and Faust warned "Missing sensor state for rebalance #N" at each such rebalance.
    calls: list[str] = []
    app = _app(calls)
    handler = incremental.handler(app)
    await handler.on_partitions_assigned({KEPT}, set(), set())
    assert calls == ["assigned", "complete"]
    assert not [c for c in calls if c.startswith(("pause", "resume "))]  # nothing kept stops
    handler.on_rebalance_return()
    assert calls[2:] == ["resume_flow", "actives_ready", "end"]
    handler.on_rebalance_return()  # the next rebalance's return ends nothing by itself
    assert calls.count("end") == 1


class _Transactions:
    """Faust's TransactionManager as the handlers call it: producers stopped for ``revoked``
    and started for ``assigned``."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    async def on_rebalance(self, assigned: set[TP], revoked: set[TP], newly: set[TP]) -> None:
        if revoked:
            self.calls.append(f"stop producers {sorted(revoked)}")
        if assigned:
            self.calls.append(f"start producers {sorted(assigned)}")


def _exactly_once_app(calls: list[str]) -> Any:
    app = _app(calls)
    app.in_transaction = True
    app.consumer.transactions = _Transactions(calls)

    async def tables_on_rebalance(*args: Any) -> None:
        calls.append("tables.on_rebalance")

    app.tables.on_rebalance = tables_on_rebalance
    app.tables.recovery.revoke_incrementally = lambda tps: calls.append(f"revoke {sorted(tps)}")
    app.on_partitions_revoked = _Signal("revoked", calls)
    return app


LOST = TP("events", 2)


async def test_exactly_once_stops_the_producers_of_what_is_lost_only() -> None:
    calls: list[str] = []
    handler = incremental.IncrementalRebalance(_exactly_once_app(calls))
    await handler.on_partitions_revoked({LOST})
    assert calls == [f"revoke {[LOST]}", f"stop producers {[LOST]}", "revoked"]
    calls.clear()
    await handler.on_partitions_revoked(set())  # lost nothing: no producer stops
    assert calls == ["revoked"]


async def test_exactly_once_starts_the_gained_producers_before_their_tables_recover() -> None:
    # Each start fences the previous owner (InitProducerId) and aborts what it left open,
    # before the gained changelogs are read; the kept partition's producer is left alone.
    calls: list[str] = []
    handler = incremental.IncrementalRebalance(_exactly_once_app(calls))
    await handler.on_partitions_assigned({KEPT, GAINED, CHANGELOG}, set(), {GAINED, CHANGELOG})
    started = [c for c in calls if "producers" in c]
    assert started == [f"start producers {sorted({GAINED, CHANGELOG})}"]
    assert calls.index(started[0]) < calls.index("tables.on_rebalance")
    assert calls.index(f"pause {sorted({GAINED, CHANGELOG})}") < calls.index(started[0])


async def test_at_least_once_touches_no_producer() -> None:
    calls: list[str] = []
    app = _exactly_once_app(calls)
    app.in_transaction = False
    handler = incremental.IncrementalRebalance(app)
    await handler.on_partitions_revoked({LOST})
    await handler.on_partitions_assigned({KEPT, GAINED}, {LOST}, {GAINED})
    assert not [c for c in calls if "producers" in c]


def _giving_up_consumer(in_transaction: bool, commits: list[dict[str, Any]]) -> Any:
    consumer: Any = object.__new__(Consumer)

    async def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    async def commit(topics: Any = None, start_new_transaction: bool = True) -> bool:
        commits.append({"topics": topics, "start_new_transaction": start_new_transaction})
        return True

    consumer.app = SimpleNamespace(
        topics=SimpleNamespace(acks_enabled_for=lambda topic: topic == LOST.topic),
        producer=SimpleNamespace(flush=nothing),
    )
    consumer.in_transaction = in_transaction
    consumer._giving_up = set()
    consumer._unacked_messages = set()
    consumer.pause_partitions = lambda tps: None
    consumer.maybe_wait_for_commit_to_finish = nothing
    consumer.commit = commit
    consumer.commit_interval = 1.0
    consumer.loop = SimpleNamespace(time=lambda: 0.0)
    return consumer


async def test_giving_up_under_exactly_once_ends_the_lost_transactions() -> None:
    # A transaction begun after the commit would stay open on a producer that stops at once,
    # holding the partition's last stable offset back until the next owner fences it.
    for in_transaction, begins_new in ((True, False), (False, True)):
        commits: list[dict[str, Any]] = []
        consumer = _giving_up_consumer(in_transaction, commits)
        await consumer._give_up({LOST, CHANGELOG})
        assert commits == [{"topics": {LOST}, "start_new_transaction": begins_new}]
        assert consumer._giving_up == {LOST}


def test_partitions_are_named_in_one_line_by_topic_in_ranges() -> None:
    # Handed to the logger as a set, Faust's formatter drew a table of several lines at INFO.
    tps = {TP("events", p) for p in (0, 1, 2, 3, 7)} | {CHANGELOG}
    assert incremental.partitions_text(tps) == "app-latest-changelog 1; events 0-3, 7"
    assert incremental.partitions_text(set()) == "none"


async def test_a_gained_partition_whose_resume_is_cut_short_is_resumed_by_the_next_pass() -> None:
    # Recovery completes inside a wait that cancels the completion as the next rebalance
    # begins, here at the seek (which waits on the coordinator, busy with the join). The held
    # partitions were forgotten before the seek: the next pass had nothing to resume ("resumed
    # nothing new") and the gained partitions stayed paused for good (the scale-out's table
    # kept w3's replayed values for its two partitions, 203 keys behind).
    calls: list[str] = []
    app = _app(calls)
    app.consumer.assignment = lambda: {KEPT, GAINED}
    seek_started = asyncio.Event()

    async def seek_waiting_on_the_coordinator(tps: set[TP]) -> None:
        calls.append(f"seek {sorted(tps)}")
        seek_started.set()
        await asyncio.Event().wait()

    app.consumer.seek_to_committed_partitions = seek_waiting_on_the_coordinator
    handler = incremental.IncrementalRebalance(app)
    handler.held = {GAINED}
    completion = asyncio.ensure_future(handler.on_recovered())
    await seek_started.wait()
    completion.cancel()  # the next rebalance's recovery start
    await asyncio.gather(completion, return_exceptions=True)
    assert handler.held == {GAINED}
    assert f"resume {[GAINED]}" not in calls

    async def seek(tps: set[TP]) -> None:
        calls.append(f"seek {sorted(tps)}")

    app.consumer.seek_to_committed_partitions = seek
    calls.clear()
    await handler.on_recovered()  # the next pass's
    assert calls[:3] == ["complete", f"seek {[GAINED]}", f"resume {[GAINED]}"]
    assert handler.held == set()


async def test_a_completion_the_next_rebalance_overtook_leaves_the_ending_to_that_one() -> None:
    # The next rebalance's handlers ran while this completion waited on its seek, before that
    # rebalance's recovery signal (sent after its table steps) could cancel it. Ending the
    # rebalance here stopped keeping the queues while the next pass was still to run: Faust's
    # recovery calls flow_control.resume(), which then emptied the queue of a partition kept
    # flowing, and its record there was never processed (test_cooperative_upgrade's w3).
    calls: list[str] = []
    app = _app(calls)
    app.flow_control = incremental.IncrementalFlowControl()
    app.tables.recovery.incremental_pass = True  # the next rebalance has something to read
    gained_next = TP("events", 3)
    app.consumer.assignment = lambda: {KEPT, GAINED, gained_next}
    seek_started, seek_done = asyncio.Event(), asyncio.Event()

    async def seek_waiting_on_the_coordinator(tps: set[TP]) -> None:
        calls.append(f"seek {sorted(tps)}")
        seek_started.set()
        await seek_done.wait()

    app.consumer.seek_to_committed_partitions = seek_waiting_on_the_coordinator
    handler = incremental.IncrementalRebalance(app)
    handler.held = {GAINED}
    completion = asyncio.ensure_future(handler.on_recovered())
    await seek_started.wait()
    await handler.on_partitions_assigned({KEPT, GAINED, gained_next}, set(), {gained_next})
    seek_done.set()
    await completion
    assert f"resume {[GAINED]}" in calls  # its own gained partition resumes all the same
    assert handler.held == {gained_next}
    assert "end" not in calls and "resume_flow" not in calls
    assert app.flow_control.keep_queues  # the next pass's resume leaves the queues alone


async def test_a_pass_the_next_rebalance_overtook_before_it_completed_ends_nothing() -> None:
    # The next rebalance's handlers began after this pass was asked for, and the pass completed
    # while that rebalance's table steps (opening and closing stores) were still under way,
    # before its recovery signal could cancel the pass. Ending the rebalance there stopped
    # keeping the queues, and the next pass's flow-control resume emptied those of the
    # partitions kept flowing: the cooperative demo's worker-1 never committed again (its
    # dropped records were counted as handed out, never fetched again, never acked).
    calls: list[str] = []
    app = _app(calls)
    app.flow_control = incremental.IncrementalFlowControl()
    gained_next = TP("events", 3)
    app.consumer.assignment = lambda: {KEPT, GAINED, gained_next}
    app.on_partitions_revoked = _Signal("revoked", calls)

    async def seek(tps: set[TP]) -> None:
        calls.append(f"seek {sorted(tps)}")

    app.consumer.seek_to_committed_partitions = seek
    handler = incremental.IncrementalRebalance(app)
    app.tables.recovery.incremental_pass = True  # each rebalance has something to read
    await handler.on_partitions_assigned({KEPT, GAINED}, set(), {GAINED})
    handler.pass_requested()  # this rebalance's pass
    assert app.flow_control.keep_queues
    await handler.on_partitions_revoked(set())  # the next rebalance's handlers begin
    calls.clear()
    await handler.on_recovered()  # the first pass completes before the next one is asked for
    assert f"resume {[GAINED]}" in calls  # what this pass recovered resumes
    assert handler.held == set()
    assert "end" not in calls and "resume_flow" not in calls
    assert app.flow_control.keep_queues  # the next pass's resume leaves the queues alone
    await handler.on_partitions_assigned({KEPT, GAINED, gained_next}, set(), {gained_next})
    handler.pass_requested()  # the next rebalance's own pass
    calls.clear()
    await handler.on_recovered()
    assert calls[:3] == ["complete", f"seek {[gained_next]}", f"resume {[gained_next]}"]
    assert "end" in calls and not app.flow_control.keep_queues


def test_the_view_s_paused_partitions_are_the_assigned_source_partitions_paused() -> None:
    # Changelog partitions are paused between replays by design; a source partition of the
    # assignment left paused is never processed, and one no longer assigned is not held.
    consumer: Any = object.__new__(Consumer)
    consumer.app = SimpleNamespace(tables=SimpleNamespace(changelog_topics={CHANGELOG.topic}))
    consumer._paused_partitions = {GAINED, CHANGELOG, TP("events", 9)}
    consumer.assignment = lambda: {KEPT, GAINED, CHANGELOG}
    assert consumer.paused_streams() == {GAINED}
