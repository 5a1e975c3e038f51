"""The temporal (as-of) stream-table join's rule without a broker: versions, deletions, history,
late stream records, and the result against a batch as-of join.

The rule runs over a dict standing in for the changelog-backed table; "a restart" is a new
`TableHistory` over a copy of the dict.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamapp.joins.core import ExpiryIndex
from streamapp.joins.outcome import Outcome
from streamapp.joins.temporal import TableHistory
from streamapp.joins.window import JoinKind
from streamapp.joins.write_back import WriteBack

P = 0


def test_a_stream_record_meets_the_value_valid_at_its_event_time() -> None:
    history = TableHistory("left", {}, history_ms=1_000)
    history.update(P, "c1", 100, "Ada")
    history.update(P, "c1", 200, "Ada L.")
    assert history.lookup(P, "c1", 99) == (Outcome.UNMATCHED, None)  # before the first
    assert history.lookup(P, "c1", 100) == (Outcome.ACCEPTED, "Ada")
    assert history.lookup(P, "c1", 199) == (Outcome.ACCEPTED, "Ada")
    assert history.lookup(P, "c1", 200) == (Outcome.ACCEPTED, "Ada L.")
    assert history.lookup(P, "c1", 10_000) == (Outcome.ACCEPTED, "Ada L.")  # the latest holds on


def test_out_of_order_table_records_and_ties() -> None:
    history = TableHistory("inner", {}, history_ms=1_000)
    history.update(P, "c1", 300, "c")
    history.update(P, "c1", 100, "a")  # older: a version before the other
    history.update(P, "c1", 200, "b")
    history.update(P, "c1", 200, "b2")  # the same time: the later record wins
    assert history.versions("c1") == [(100, "a"), (200, "b2"), (300, "c")]
    assert history.lookup(P, "c1", 250) == (Outcome.ACCEPTED, "b2")


def test_a_deletion_holds_from_its_time() -> None:
    history = TableHistory("left", {}, history_ms=1_000)
    history.update(P, "c1", 100, "Ada")
    history.update(P, "c1", 200, None)
    history.update(P, "c1", 300, "Ada again")
    assert history.lookup(P, "c1", 150) == (Outcome.ACCEPTED, "Ada")
    assert history.lookup(P, "c1", 250) == (Outcome.UNMATCHED, None)
    assert history.lookup(P, "c1", 300) == (Outcome.ACCEPTED, "Ada again")
    assert history.emits(Outcome.UNMATCHED)  # left: emitted with None
    assert not TableHistory("inner", {}, history_ms=1).emits(Outcome.UNMATCHED)
    assert not history.emits(Outcome.LATE)


def test_history_is_bounded_and_older_stream_records_are_late() -> None:
    store: dict[str, Any] = {}
    history = TableHistory("left", store, history_ms=100, index=ExpiryIndex(1))
    history.update(P, "c2", 0, "old")
    for t in range(0, 1_000, 50):
        history.update(P, "c1", t, f"v{t}")
    history.expire(P)
    # Clock 950: versions that ended before 850 are gone, the one valid at 850 is kept.
    assert history.versions("c1") == [(850, "v850"), (900, "v900"), (950, "v950")]
    assert history.lookup(P, "c1", 850) == (Outcome.ACCEPTED, "v850")
    assert history.lookup(P, "c1", 849) == (Outcome.LATE, None)
    history.count_late(P)
    assert history.late_count(P) == 1
    # The latest version stays, however old: a key updated once is always there.
    assert history.versions("c2") == [(0, "old")]
    assert history.lookup(P, "c2", 900) == (Outcome.ACCEPTED, "old")


def test_a_key_left_with_a_deletion_only_is_forgotten_once_it_is_history() -> None:
    store: dict[str, Any] = {}
    history = TableHistory("left", store, history_ms=10, index=ExpiryIndex(1))
    history.update(P, "c1", 100, "Ada")
    history.update(P, "c1", 200, None)
    history.update(P, "c2", 209, "x")
    history.expire(P)
    # A stream record at 199 may still come (within the history): both must stay.
    assert history.versions("c1") == [(100, "Ada"), (200, None)]
    history.update(P, "c2", 210, "x")
    history.expire(P)
    assert "k/c1" not in store
    assert history.lookup(P, "c1", 205) == (Outcome.UNMATCHED, None)


def test_versions_are_kept_to_the_last_stream_record_that_is_not_late() -> None:
    history = TableHistory("left", {}, history_ms=100, index=ExpiryIndex(1))
    history.update(P, "c1", 0, "v0")
    history.update(P, "c1", 101, "v101")
    history.update(P, "c2", 200, "x")  # clock 200: a stream record at 100 is not late
    history.expire(P)
    assert history.lookup(P, "c1", 100) == (Outcome.ACCEPTED, "v0")
    assert history.lookup(P, "c1", 99) == (Outcome.LATE, None)
    history.update(P, "c2", 201, "x")
    history.expire(P)
    assert history.versions("c1") == [(101, "v101")]


def test_a_deletion_stays_while_a_table_record_before_it_may_come() -> None:
    history = TableHistory("left", {}, history_ms=100, index=ExpiryIndex(1))
    history.update(P, "c1", 100, None)
    history.update(P, "c2", 199, "x")
    history.expire(P)
    # At clock 199 a table record at 99 is not late: it holds until the deletion at 100.
    assert history.update(P, "c1", 99, "Ada") is Outcome.ACCEPTED
    assert history.lookup(P, "c1", 150) == (Outcome.UNMATCHED, None)
    assert history.lookup(P, "c1", 99) == (Outcome.ACCEPTED, "Ada")


def test_a_table_record_older_than_the_history_is_late() -> None:
    history = TableHistory("left", {}, history_ms=10)
    history.update(P, "c1", 100, "Ada")
    assert history.update(P, "c1", 90, "older") is Outcome.ACCEPTED  # 10 behind: kept
    assert history.update(P, "c1", 89, "too old") is Outcome.LATE
    assert history.versions("c1") == [(90, "older"), (100, "Ada")]


def test_outer_and_negative_history_are_refused() -> None:
    with pytest.raises(ValueError):
        TableHistory("outer", {}, history_ms=1)
    with pytest.raises(ValueError):
        TableHistory(JoinKind.LEFT, {}, history_ms=-1)


# -- the whole: equal to a batch as-of join --

Table = tuple[str, str, int, str | None]  # ("table", key, time, value)
Stream = tuple[str, str, int, None]  # ("stream", key, time, None)


def as_of(table: list[tuple[int, str, int, str | None]], key: str, t: int) -> str | None:
    """The batch as-of join: the value of the table record of ``key`` with the greatest time
    at or before ``t`` (of one time, the later offset); ``table``: (offset, key, time, value)."""
    best: tuple[int, int] | None = None
    value = None
    for offset, k, time_ms, v in table:
        if k == key and time_ms <= t and (best is None or (time_ms, offset) > best):
            best, value = (time_ms, offset), v
    return value


@settings(max_examples=400, deadline=None)
@given(
    history_ms=st.integers(0, 15),
    bucket=st.integers(1, 10),
    events=st.lists(
        st.tuples(
            st.sampled_from(["table", "stream"]),
            st.sampled_from(["a", "b"]),
            st.integers(0, 40),
            st.sampled_from(["x", "y", "z", None]),
        ),
        min_size=5,
        max_size=60,
    ),
    batch_sizes=st.lists(st.integers(1, 8), min_size=1, max_size=10),
    restart_at=st.integers(0, 10),
)
def test_equals_a_batch_as_of_join_whatever_the_interleaving(
    history_ms: int,
    bucket: int,
    events: list[tuple[str, str, int, str | None]],
    batch_sizes: list[int],
    restart_at: int,
) -> None:
    """Each stream record not late (its time at least the table clock less the history) gets
    the as-of value over the table records processed before it (those not late); and when every
    such record of its key at or before its time was processed before it, the as-of value over
    the whole table topic: the result does not depend on the interleaving. Over batches
    (write-back stores, one expire per batch) and across a restart."""
    store: dict[str, Any] = {}
    history = TableHistory("left", WriteBack(store), history_ms, index=ExpiryIndex(bucket))
    processed: list[tuple[int, str, int, str | None]] = []
    # The table records that are not late: at most the history behind the table clock.
    whole: list[tuple[int, str, int, str | None]] = []
    table_clock: int | None = None
    for i, (role, k, t, v) in enumerate(events):
        if role == "table" and (table_clock is None or t >= table_clock - history_ms):
            whole.append((i, k, t, v))
            table_clock = t if table_clock is None else max(table_clock, t)
    on_time = {i for i, *_ in whole}
    at = 0
    batch_no = 0
    while at < len(events):
        if batch_no == restart_at:
            store = dict(store)
            history = TableHistory("left", WriteBack(store), history_ms, index=ExpiryIndex(bucket))
        for i in range(at, min(len(events), at + batch_sizes[batch_no % len(batch_sizes)])):
            role, key, t, value = events[i]
            if role == "table":
                outcome = history.update(P, key, t, value)
                assert (outcome is Outcome.ACCEPTED) == (i in on_time)
                if i in on_time:
                    processed.append((i, key, t, value))
                continue
            clock = max((pt for _, _, pt, _ in processed), default=None)
            outcome, got = history.lookup(P, key, t)
            if clock is not None and t < clock - history_ms:
                assert outcome is Outcome.LATE
                continue
            want = as_of(processed, key, t)
            assert (outcome, got) == (
                (Outcome.ACCEPTED, want) if want is not None else (Outcome.UNMATCHED, None)
            )
            if all(o < i for o, k, pt, _ in whole if k == key and pt <= t):
                assert got == as_of(whole, key, t)
        at = min(len(events), at + batch_sizes[batch_no % len(batch_sizes)])
        history.expire(P)
        assert isinstance(history.store, WriteBack)
        history.store.write_through()
        batch_no += 1
