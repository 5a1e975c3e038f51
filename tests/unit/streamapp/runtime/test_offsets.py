"""The offset ledger: which offset of a partition may be committed, given what was handed out
and what of it the streams processed (`streamapp.runtime.offsets`)."""

from __future__ import annotations

from streamapp.runtime.offsets import OffsetLedger

TP = ("events", 0)


def _handed(ledger: OffsetLedger[tuple[str, int]], *offsets: int) -> dict[int, object]:
    records = {offset: object() for offset in offsets}
    for offset, record in records.items():
        ledger.handed_out(TP, offset, record)
    return records


def test_the_commit_follows_the_processed_prefix_whatever_the_order_of_acks() -> None:
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    records = _handed(ledger, 10, 11, 12, 13)
    assert ledger.committable() == {}
    assert ledger.ack(TP, 12, records[12])
    assert ledger.committable() == {}  # 10 and 11 hold the partition back
    assert ledger.ack(TP, 10, records[10])
    assert ledger.committable() == {TP: 11}
    assert ledger.ack(TP, 11, records[11])
    assert ledger.committable() == {TP: 13}
    assert ledger.pending() == 1


def test_offsets_never_handed_out_are_not_waited_for() -> None:
    """Transaction markers and compacted records leave gaps: the commit passes them."""
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    records = _handed(ledger, 3, 7, 8)
    for offset in (3, 7, 8):
        ledger.ack(TP, offset, records[offset])
    assert ledger.committable() == {TP: 9}


def test_a_commit_is_noted_and_a_refused_one_stays_committable() -> None:
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    records = _handed(ledger, 0, 1)
    ledger.ack(TP, 0, records[0])
    ledger.ack(TP, 1, records[1])
    assert ledger.committable() == {TP: 2}
    # Refused: nothing noted, the same offset is committable again.
    assert ledger.committable() == {TP: 2}
    ledger.committed({TP: 2})
    assert ledger.committable() == {}
    assert ledger.last_committed(TP) == 2


def test_a_record_acked_twice_or_by_another_object_counts_once() -> None:
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    records = _handed(ledger, 5)
    assert not ledger.ack(TP, 5, object())  # a record of the same offset handed out earlier
    assert ledger.ack(TP, 5, records[5])
    assert not ledger.ack(TP, 5, records[5])
    assert ledger.acks_since_reset == 1


def test_a_late_ack_from_before_a_seek_does_not_count_for_the_record_handed_out_since() -> None:
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    before = _handed(ledger, 20, 21)
    ledger.restart(TP, 20)  # sought back to the committed offset (a rebalance)
    after = _handed(ledger, 20, 21)
    assert not ledger.ack(TP, 21, before[21])
    assert not ledger.ack(TP, 20, before[20])
    assert ledger.committable() == {}
    assert ledger.ack(TP, 20, after[20])
    assert ledger.committable() == {TP: 21}


def test_dropped_records_go_out_once_more_and_nothing_else_twice() -> None:
    """Records dropped from a stream queue unprocessed: the partition is read again from the
    first of them; the ones handed out since (or in between) are not handed out again."""
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    records = _handed(ledger, 0, 1, 2, 3, 4, 5)
    ledger.ack(TP, 0, records[0])
    ledger.ack(TP, 2, records[2])  # processed by another stream before the clear
    assert ledger.drop(TP, 1, records[1])
    assert ledger.drop(TP, 3, records[3])
    assert not ledger.drop(TP, 0, records[0])  # processed already: nothing to do again
    assert ledger.rewind(TP) == (1, 2)
    admitted = [offset for offset in range(8) if ledger.admit(TP, offset)]
    # 1 and 3 again, 4 and 5 were handed out (still queued or in an agent), 6 on is new.
    assert admitted == [1, 3, 6, 7]
    again = {1: object(), 3: object()}
    for offset, record in again.items():
        ledger.handed_out(TP, offset, record)
    for offset in (1, 3):
        ledger.ack(TP, offset, again[offset])
    ledger.ack(TP, 4, records[4])
    ledger.ack(TP, 5, records[5])
    assert ledger.committable() == {TP: 6}


def test_nothing_dropped_nothing_to_rewind() -> None:
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    _handed(ledger, 0)
    assert ledger.rewind(TP) is None
    assert ledger.admit(TP, 0)


def test_a_partition_given_up_is_forgotten() -> None:
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    records = _handed(ledger, 0)
    ledger.forget([TP])
    assert not ledger.ack(TP, 0, records[0])
    assert ledger.committable() == {}
    assert ledger.pending() == 0
