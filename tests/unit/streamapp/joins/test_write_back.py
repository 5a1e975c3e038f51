"""The write-back store a join uses over a batch, and the join over it: without a broker.

The join over write-back stores written through every few records must emit what the join over
plain stores emits, record for record, and leave the same stores behind.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamapp.joins.core import Entry, ExpiryIndex, JoinProcessor, Outcome, Pair
from streamapp.joins.window import JoinKind, JoinWindow, Side
from streamapp.joins.write_back import WriteBack


class Recording(MutableMapping[str, Any]):
    """A dict that lists its writes and deletes, in order, and counts its reads."""

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self.data = dict(data or {})
        self.log: list[tuple[str, str]] = []
        self.reads = 0

    def __getitem__(self, key: str) -> Any:
        self.reads += 1
        return self.data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.log.append(("set", key))
        self.data[key] = value

    def __delitem__(self, key: str) -> None:
        self.log.append(("del", key))
        del self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def test_reads_see_the_batch_writes_and_the_store_sees_them_only_when_written_through() -> None:
    store = Recording({"a": 1, "b": 2})
    wb = WriteBack(store)
    wb["a"] = 10
    wb["c"] = 3
    del wb["b"]
    assert (wb["a"], wb.get("b"), wb["c"], "b" in wb, "c" in wb) == (10, None, 3, False, True)
    assert sorted(wb) == ["a", "c"] and len(wb) == 2
    assert store.data == {"a": 1, "b": 2} and store.log == []
    with pytest.raises(KeyError):
        wb["b"]
    with pytest.raises(KeyError):
        del wb["b"]
    wb.write_through()
    assert store.data == {"a": 10, "c": 3}
    assert wb.pending == 0


def test_a_key_written_many_times_is_written_once_and_the_last_keys_after_the_rest() -> None:
    store = Recording()
    wb = WriteBack(store)
    for i in range(5):
        wb["~seen/0"] = i
        wb["k/x"] = [i]
        wb["~clock/0"] = i
    wb.write_through(last=lambda key: key.startswith("~seen/"))
    assert store.log == [("set", "k/x"), ("set", "~clock/0"), ("set", "~seen/0")]
    assert store.data == {"~seen/0": 4, "k/x": [4], "~clock/0": 4}


def test_a_store_value_is_read_once_per_batch_and_afresh_in_the_next() -> None:
    store = Recording({"a": 1})
    wb = WriteBack(store)
    assert [wb.get("a"), wb.get("a"), wb.get("missing"), wb.get("missing")] == [1, 1, None, None]
    reads = store.reads
    wb.write_through()
    store.data["a"] = 2  # changed under it between batches (a restore, say)
    assert wb["a"] == 2 and store.reads == reads + 1


def test_deleting_what_the_store_does_not_hold_after_writing_it_writes_nothing() -> None:
    store = Recording()
    wb = WriteBack(store)
    wb["x"] = 1
    del wb["x"]
    wb.write_through()
    assert store.log == [] and store.data == {}


def test_discard_forgets_the_batch() -> None:
    store = Recording({"a": 1})
    wb = WriteBack(store)
    wb["a"] = 2
    del wb["a"]
    wb.discard()
    wb.write_through()
    assert store.data == {"a": 1} and store.log == []


# -- the join over write-back stores --

WINDOW = JoinWindow(before_ms=0, after_ms=50, grace_ms=20)
P = 0


def _feed(
    proc: JoinProcessor,
    records: list[tuple[Side, str, int, str | None]],
    batch: int | None,
) -> tuple[list[tuple[Outcome, tuple[Pair, ...]]], list[Pair]]:
    """Each record's outcome and pairs, and what expired; written through every ``batch``."""
    offsets = {Side.LEFT: 0, Side.RIGHT: 0}
    arrivals: list[tuple[Outcome, tuple[Pair, ...]]] = []
    unmatched: list[Pair] = []
    for i, (side, key, time_ms, record_id) in enumerate(records, start=1):
        offset = offsets[side]
        offsets[side] += 1
        arrival = proc.process(
            side, P, key, Entry(offset, time_ms, f"{side.value}{i}", id=record_id)
        )
        if arrival.outcome is Outcome.LATE:
            proc.count_late(side, P, offset)
        arrivals.append((arrival.outcome, arrival.pairs))
        expiry = proc.plan_expiry(P)
        unmatched.extend(expiry.unmatched)
        expiry.apply()
        if batch is not None and i % batch == 0:
            proc.write_through()
    proc.write_through()
    return arrivals, unmatched


records_strategy = st.lists(
    st.tuples(
        st.sampled_from([Side.LEFT, Side.RIGHT]),
        st.sampled_from(["a", "b", "c"]),
        st.integers(min_value=0, max_value=400),
        st.one_of(st.none(), st.sampled_from(["i1", "i2"])),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    records=records_strategy,
    batch=st.integers(min_value=1, max_value=25),
    kind=st.sampled_from(list(JoinKind)),
    width=st.sampled_from([1, 30]),
)
def test_the_join_over_batches_emits_and_stores_what_it_does_record_by_record(
    records: list[tuple[Side, str, int, str | None]], batch: int, kind: JoinKind, width: int
) -> None:
    plain_left: dict[str, Any] = {}
    plain_right: dict[str, Any] = {}
    plain = JoinProcessor(WINDOW, kind, plain_left, plain_right, index=ExpiryIndex(width))
    left, right = Recording(), Recording()
    batched = JoinProcessor(
        WINDOW, kind, WriteBack(left), WriteBack(right), index=ExpiryIndex(width)
    )
    assert _feed(batched, records, batch) == _feed(plain, records, None)
    assert (left.data, right.data) == (plain_left, plain_right)
    # Each entry is written at most once per batch, and a side's ~seen after its other entries.
    batches_fed = -(-len(records) // batch) + 1
    for store in (left, right):
        assert len(store.log) <= len({key for _, key in store.log}) * batches_fed
        seen_at = [i for i, (_, key) in enumerate(store.log) if key.startswith("~seen/")]
        assert len(seen_at) <= batches_fed


def test_a_replay_after_a_batch_that_was_not_written_joins_the_records_again() -> None:
    """A batch the worker did not finish wrote nothing: its records come again as new."""
    left, right = Recording(), Recording()
    proc = JoinProcessor(WINDOW, JoinKind.INNER, WriteBack(left), WriteBack(right))
    first = proc.process(Side.RIGHT, P, "a", Entry(0, 120, "imp"))
    second = proc.process(Side.LEFT, P, "a", Entry(0, 100, "click"))
    assert first.outcome is Outcome.ACCEPTED and len(second.pairs) == 1
    proc.discard()  # the batch raised: nothing reached the tables
    assert left.data == {} and right.data == {}
    again = proc.process(Side.RIGHT, P, "a", Entry(0, 120, "imp"))
    pairs = proc.process(Side.LEFT, P, "a", Entry(0, 100, "click")).pairs
    assert again.outcome is Outcome.ACCEPTED and [p.left.value for p in pairs if p.left] == [
        "click"
    ]


def _feed_sweeping_per_batch(
    proc: JoinProcessor, records: list[tuple[Side, str, int, str | None]], batch: int
) -> tuple[list[tuple[Outcome, tuple[Pair, ...]]], list[Pair]]:
    """As `_feed` over batches, but with one sweep per batch, when it ends (the wiring's way)."""
    offsets = {Side.LEFT: 0, Side.RIGHT: 0}
    arrivals: list[tuple[Outcome, tuple[Pair, ...]]] = []
    unmatched: list[Pair] = []

    def sweep() -> None:
        expiry = proc.plan_expiry(P)
        unmatched.extend(expiry.unmatched)
        expiry.apply()
        proc.write_through()

    for i, (side, key, time_ms, record_id) in enumerate(records, start=1):
        offset = offsets[side]
        offsets[side] += 1
        arrival = proc.process(
            side, P, key, Entry(offset, time_ms, f"{side.value}{i}", id=record_id)
        )
        if arrival.outcome is Outcome.LATE:
            proc.count_late(side, P, offset)
        arrivals.append((arrival.outcome, arrival.pairs))
        if i % batch == 0:
            sweep()
    sweep()
    return arrivals, unmatched


@settings(max_examples=200, deadline=None)
@given(
    records=records_strategy,
    batch=st.integers(min_value=1, max_value=25),
    kind=st.sampled_from(list(JoinKind)),
    width=st.sampled_from([1, 30]),
)
def test_one_sweep_per_batch_joins_and_expires_what_a_sweep_per_record_does(
    records: list[tuple[Side, str, int, str | None]], batch: int, kind: JoinKind, width: int
) -> None:
    """Records of a batch see what its sweep will drop as gone (duplicates and replays tell):
    every outcome and pair is the record-by-record one, the unmatched are the same records
    (emitted per batch, so in another order), and the stores end the same."""
    plain_left: dict[str, Any] = {}
    plain_right: dict[str, Any] = {}
    plain = JoinProcessor(WINDOW, kind, plain_left, plain_right, index=ExpiryIndex(width))
    left, right = Recording(), Recording()
    batched = JoinProcessor(
        WINDOW, kind, WriteBack(left), WriteBack(right), index=ExpiryIndex(width)
    )
    arrivals, unmatched = _feed_sweeping_per_batch(batched, records, batch)
    plain_arrivals, plain_unmatched = _feed(plain, records, None)
    assert arrivals == plain_arrivals
    order = lambda p: repr(p)  # noqa: E731 - pairs have no order of their own
    assert sorted(unmatched, key=order) == sorted(plain_unmatched, key=order)
    # Up to which offset output is known delivered (``~out``) is noted at each sweep that
    # found something: per batch, it lags.
    assert (_but_out(left.data), _but_out(right.data)) == (
        _but_out(plain_left),
        _but_out(plain_right),
    )


def _but_out(store: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in store.items() if not key.startswith("~out/")}


def test_a_duplicate_of_a_record_its_batch_will_sweep_is_a_new_record() -> None:
    """The sweep comes at the batch's end; a record before it finds the expired one gone."""
    proc = JoinProcessor(
        WINDOW, JoinKind.LEFT, WriteBack(Recording()), WriteBack(Recording()), index=ExpiryIndex(1)
    )
    assert proc.process(Side.LEFT, P, "a", Entry(0, 100, "c1", id="x")).outcome is Outcome.ACCEPTED
    # The right clock passes 100 + after 50 + grace 20: the click has expired, not swept yet.
    proc.process(Side.RIGHT, P, "b", Entry(0, 171, "imp"))
    again = proc.process(Side.LEFT, P, "a", Entry(1, 160, "c2", id="x"))
    assert again.outcome is Outcome.ACCEPTED
    expiry = proc.plan_expiry(P)
    assert [p.left.value for p in expiry.unmatched if p.left] == ["c1"]


class KeyReads(Recording):
    """Counts the reads of record entries (``k/...``) apart."""

    def __init__(self) -> None:
        super().__init__()
        self.entry_reads: list[str] = []

    def __getitem__(self, key: str) -> Any:
        if key.startswith("k/"):
            self.entry_reads.append(key)
        return super().__getitem__(key)


def test_a_key_the_expiry_index_does_not_list_is_not_read_and_one_it_lists_is() -> None:
    left, right = KeyReads(), KeyReads()
    proc = JoinProcessor(WINDOW, JoinKind.LEFT, left, right, index=ExpiryIndex(10))
    for i in range(5):  # new auctions: nothing held on either side for their keys
        proc.process(Side.RIGHT, P, f"a{i}", Entry(i, 100 + i, "imp"))
    assert left.entry_reads == [] and right.entry_reads == []
    # A click on a held impression reads it and joins; its own side holds nothing for the key.
    joined = proc.process(Side.LEFT, P, "a3", Entry(0, 103, "click"))
    assert len(joined.pairs) == 1 and right.entry_reads == ["k/a3"] and left.entry_reads == []
    # A restart (a new processor over the same stores) finds the held keys in the index.
    again = JoinProcessor(WINDOW, JoinKind.LEFT, left, right, index=ExpiryIndex(10))
    assert len(again.process(Side.LEFT, P, "a4", Entry(1, 104, "click")).pairs) == 1
    # The impressions go on past the last one handled before: those were committed, so
    # nothing held for them is kept for a replay once expired.
    again.process(Side.RIGHT, P, "a5", Entry(5, 105, "imp"))
    # Expired and swept, a key is no longer listed: not read again.
    expiry = again.plan_expiry(P)  # the clicks' clock (104) expires nothing on the right
    expiry.apply()
    again.process(Side.LEFT, P, "zz", Entry(2, 1_000, "click"))  # moves the left clock on
    expiry = again.plan_expiry(P)
    assert {p.right.value for p in expiry.unmatched if p.right} == set()  # a left join
    expiry.apply()
    assert right.data.get("k/a0") is None
    reads = list(right.entry_reads)
    again.process(Side.LEFT, P, "a0", Entry(3, 1_001, "click"))
    assert right.entry_reads == reads
