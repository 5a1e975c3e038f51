"""Changelog records a table cannot decode: skipped by recovery, counted, never stored.

A table's changelog is written by the table, but anything with access to the topic can write
bad bytes to it (a tool, a misconfigured producer, an app of another version). Faust's conductor
decodes each changelog record before recovery takes it; one that does not decode never reached
the changelog queue, so recovery waited for its offset: forever under at_least_once when it was
the partition's last record (the replay ends only when the record at the end offset less one
arrives), a fallback of about 15 s under exactly_once. `streamapp.bad_records.Topic` now hands
recovery an `UndecodableChangelogRecord` in its place: recovery counts its offset as replayed
(the progress line and the end of the replay stay true), and the table's
``apply_changelog_batch`` leaves it out of the store, whose persisted offset still moves past it,
so the next recovery does not read it again. One warning names the table, partition and offset;
the record counts as skipped in ``streamapp_records_skipped_total`` (topic: the changelog). This
holds whatever ``bad_record_policy`` says: the record is not an input to dead-letter or to fail
on, and failing would keep the worker from ever being ready.

Tables whose class takes this (`SkipsUndecodableChangelogRecords`): ``app.Table`` (windowed
ones included) and ``app.GlobalTable`` of a `streamapp.App`. Others (Faust's ``SetTable``) keep
Faust's behaviour: the record is skipped before recovery sees it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import faust
from faust.types import TP, AppT, EventT

from streamapp.runtime.stores import OnStreamappStore


class UndecodableChangelogRecord(faust.Event):
    """Stands in for a changelog record whose key or value did not decode (key and value None;
    ``message`` holds its bytes and where it is)."""


def changelog_table(app: AppT, topic: str) -> Any | None:
    """The app's table whose changelog is ``topic``; None if it is no table's changelog."""
    tables = getattr(app, "tables", None)
    if tables is None:
        return None
    for table in tables.values():
        if table.changelog_topic.get_topic_name() == topic:
            return table
    return None


def counted_already(app: AppT, tp: TP, offset: int) -> bool:
    """Whether recovery has counted ``offset`` of changelog partition ``tp`` already: a replay
    is sought to the store's own offset, so the record there is fetched again, and recovery
    drops it (no warning is due for it twice)."""
    # On Faust's TableManager, not its TableManagerT interface.
    recovery: Any = getattr(app.tables, "recovery", None)
    if recovery is None:
        return False
    for offsets in (recovery.active_offsets, recovery.standby_offsets):
        seen = offsets.get(tp)
        if seen is not None and offset <= seen:
            return True
    return False


def skips_undecodable(table: Any) -> bool:
    return isinstance(table, SkipsUndecodableChangelogRecords)


class SkipsUndecodableChangelogRecords:
    """A table mixin: recovery's `UndecodableChangelogRecord` stand-ins are not stored."""

    data: Any

    def apply_changelog_batch(self, batch: Iterable[EventT[Any]]) -> None:
        events = list(batch)
        records = [e for e in events if not isinstance(e, UndecodableChangelogRecord)]
        if len(records) == len(events):
            super().apply_changelog_batch(events)  # type: ignore[misc]
            return
        if records:
            super().apply_changelog_batch(records)  # type: ignore[misc]
        # The store's offset covers the records skipped after the last one stored too, so
        # recovery does not read them again; written after the data, as Faust's store does.
        applied: dict[TP, int] = {}
        for event in records:
            tp = event.message.tp
            applied[tp] = max(event.message.offset, applied.get(tp, -1))
        skipped: dict[TP, int] = {}
        for event in events:
            if isinstance(event, UndecodableChangelogRecord):
                tp = event.message.tp
                skipped[tp] = max(event.message.offset, skipped.get(tp, -1))
        for tp, offset in skipped.items():
            if offset > applied.get(tp, -1):
                self.data.set_persisted_offset(tp, offset)

    async def on_changelog_event(self, event: EventT[Any]) -> None:
        if not isinstance(event, UndecodableChangelogRecord):
            await super().on_changelog_event(event)  # type: ignore[misc]


class GlobalTable(OnStreamappStore, SkipsUndecodableChangelogRecords, faust.GlobalTable):
    """Faust's GlobalTable on streamapp's RocksDB store, whose recovery skips changelog records
    it cannot decode."""
