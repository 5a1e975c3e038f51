"""Commit offsets over gaps (transaction markers): streamapp's consumer against Faust's bookkeeping.

Only the offset bookkeeping is exercised (no broker, no Faust service): the consumer object is
made without running its constructor, and given the four structures those methods use.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from faust.transport.drivers.aiokafka import Consumer as FaustConsumer
from faust.types import TP
from intervaltree import IntervalTree

from streamapp.faust_compat.transport import Consumer

TOPIC = TP("repartitioned", 0)
# Records read from a topic written under exactly_once: the commit markers of the
# transactions take offsets 5 and 10, which a read_committed consumer never sees.
READ = [0, 1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14]


def _bookkeeping(cls: type) -> Any:
    consumer: Any = object.__new__(cls)
    consumer._acked = defaultdict(list)
    consumer._acked_index = defaultdict(set)
    consumer._gap = defaultdict(IntervalTree)
    consumer._committed_offset = defaultdict(lambda: None)
    return consumer


async def _read_and_ack(consumer: Any, offsets: list[int], last_read: int | None) -> int | None:
    # As Faust's fetch loop does: a jump past the last read offset is recorded as a gap.
    for offset in offsets:
        if last_read is not None and offset - last_read > 1:
            await consumer._add_gap(TOPIC, last_read + 1, offset)
        last_read = offset
        consumer._acked[TOPIC].append(offset)
    return last_read


async def test_one_commit_covers_every_record_read_across_markers() -> None:
    consumer = _bookkeeping(Consumer)
    last = await _read_and_ack(consumer, READ, None)
    assert consumer._new_offset(TOPIC) == 15
    consumer._committed_offset[TOPIC] = 15
    # The next transaction's marker at 15, then 16 and 17 read.
    await _read_and_ack(consumer, [16, 17], last)
    assert consumer._new_offset(TOPIC) == 18


async def test_faust_alone_stops_at_the_first_marker() -> None:
    # Why the override exists: the record after each gap is counted twice, and the run of
    # consecutive offsets a commit may advance over ends there.
    consumer = _bookkeeping(FaustConsumer)
    await _read_and_ack(consumer, READ, None)
    assert consumer._new_offset(TOPIC) == 7


def test_a_refused_commit_is_sent_again_at_the_next_commit() -> None:
    # Transport fix 20: Faust took the offsets out of its acks and noted them committed though
    # the broker refused the commit (a cooperative join's old generation): never sent again.
    from streamapp.faust_compat.transport import note_commit_outcome

    consumer = _bookkeeping(Consumer)
    consumer._refused_commits = {}
    consumer._acked[TOPIC].extend([0, 1, 2, 3])
    offsets = consumer._filter_committable_offsets([TOPIC])
    assert offsets == {TOPIC: 4}
    consumer._committed_offset[TOPIC] = 4  # as Faust's _commit_offsets notes it, refused or not
    note_commit_outcome(
        consumer._committed_offset,
        consumer._refused_commits,
        {TOPIC: None},
        offsets,
        committed=False,
    )
    assert consumer._committed_offset[TOPIC] is None
    # Nothing processed since: Faust's own filter has nothing left to commit; the refused
    # offset goes again.
    assert FaustConsumer._filter_committable_offsets(consumer, [TOPIC]) == {}
    assert consumer._filter_committable_offsets([TOPIC]) == {TOPIC: 4}
    consumer._committed_offset[TOPIC] = 4
    note_commit_outcome(
        consumer._committed_offset,
        consumer._refused_commits,
        {TOPIC: None},
        {TOPIC: 4},
        committed=True,
    )
    assert consumer._refused_commits == {}
    assert consumer._filter_committable_offsets([TOPIC]) == {}


def test_a_refused_offset_never_moves_a_commit_back() -> None:
    from streamapp.faust_compat.transport import note_commit_outcome

    consumer = _bookkeeping(Consumer)
    consumer._refused_commits = {TOPIC: 4}
    consumer._committed_offset[TOPIC] = 9  # committed further since (a later commit, a seek)
    assert consumer._filter_committable_offsets([TOPIC]) == {}
    refused: dict[TP, int] = {TOPIC: 12}
    note_commit_outcome({TOPIC: 9}, refused, {TOPIC: 9}, {TOPIC: 7}, committed=True)
    assert refused == {TOPIC: 12}  # a commit below it does not settle it
    consumer._forget_refused_commits([TOPIC])
    assert consumer._refused_commits == {}


class _Committing(Consumer):
    """The consumer with what `_commit_offsets` asks of its service: assigned, running."""

    in_transaction = False
    should_stop = False

    def assignment(self) -> set[TP]:
        return {TOPIC}


async def test_a_refused_commit_is_said_in_one_line_of_streamapp(
    monkeypatch: Any, caplog: Any
) -> None:
    """aiokafka's ERROR for it is demoted (`streamapp.quiet_logs`): streamapp's line says it."""
    refused = True

    async def faust_commit(self: Any, offsets: Any, start_new_transaction: bool = True) -> bool:
        self._committed_offset.update(offsets)
        return not refused

    monkeypatch.setattr(FaustConsumer, "_commit_offsets", faust_commit)
    consumer = _bookkeeping(_Committing)
    consumer._refused_commits = {}
    caplog.set_level("INFO", logger="streamapp.faust_compat.transport")
    assert await consumer._commit_offsets({TOPIC: 4}) is False
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "streamapp: the group refused a commit of repartitioned 0 (a rebalance is under way); "
        "the offsets go again with the next commit"
    ]
    assert consumer._refused_commits == {TOPIC: 4}
    caplog.clear()
    refused = False
    assert await consumer._commit_offsets({TOPIC: 4}) is True
    assert caplog.records == [] and consumer._refused_commits == {}
