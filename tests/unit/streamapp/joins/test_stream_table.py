"""The stream-table join's rule without a broker: latest value wins, deletes, inner and left."""

from __future__ import annotations

from typing import Any

import pytest

from streamapp.joins import JoinKind, Outcome, TableHistory, TableLookup


def test_stream_record_sees_the_latest_table_value() -> None:
    store: dict[str, Any] = {}
    lookup = TableLookup(JoinKind.INNER, store)
    lookup.update("c1", {"name": "Ada"})
    lookup.update("c1", {"name": "Ada L."})
    assert lookup.lookup("c1") == (True, {"name": "Ada L."})


def test_inner_drops_and_left_keeps_records_without_a_table_value() -> None:
    assert TableLookup(JoinKind.INNER, {}).lookup("nobody") == (False, None)
    assert TableLookup(JoinKind.LEFT, {}).lookup("nobody") == (True, None)


def test_a_none_value_deletes_the_key() -> None:
    store: dict[str, Any] = {}
    lookup = TableLookup("left", store)
    lookup.update("c1", {"name": "Ada"})
    lookup.update("c1", None)
    assert lookup.lookup("c1") == (True, None)
    assert store == {}
    lookup.update("never-there", None)  # deleting a missing key is fine


def test_a_later_update_does_not_change_what_was_emitted() -> None:
    lookup = TableLookup("left", {})
    before = lookup.lookup("c1")
    lookup.update("c1", {"name": "Ada"})
    assert before == (True, None)
    assert lookup.lookup("c1") == (True, {"name": "Ada"})


def test_outer_is_refused() -> None:
    with pytest.raises(ValueError):
        TableLookup("outer", {})


def test_a_plain_lookup_reads_a_temporal_table_and_back() -> None:
    store: dict[str, Any] = {}
    TableLookup("left", store).update("c1", "Ada")
    history = TableHistory("left", store, history_ms=100)
    assert history.lookup(0, "c1", -5) == (Outcome.ACCEPTED, "Ada")  # valid from the start
    history.update(0, "c1", 100, "Ada L.")
    assert TableLookup("left", store).lookup("c1") == (True, "Ada L.")
