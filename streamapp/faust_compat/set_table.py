"""streamapp's ``SetTable`` and ``SetGlobalTable`` (the App's ``SetTable`` / ``SetGlobalTable``
settings): Faust's, keeping their sets in `streamapp.set_tables.StoredSets`.

Faust private name (`streamapp.faust_compat.PRIVATE_NAMES`): ``Collection._new_store``, which
Faust's ``SetTable`` overrides to make its manager of sets; Faust has no setting for that class.
"""

from __future__ import annotations

from typing import Any

import faust
from faust.types import StoreT
from faust.types.tables import GlobalTableT

from streamapp.changelog_records import SkipsUndecodableChangelogRecords
from streamapp.runtime.stores import OnStreamappStore
from streamapp.set_tables import StoredSets


class SetTable(OnStreamappStore, SkipsUndecodableChangelogRecords, faust.SetTable[Any, Any]):
    """Faust's SetTable whose RocksDB store (streamapp's) holds each set as it is now
    (`streamapp.set_tables`), and whose recovery skips changelog records it cannot decode."""

    def _new_store(self) -> StoreT[Any, Any]:
        return StoredSets(self)


class SetGlobalTable(SetTable, GlobalTableT):
    """`SetTable` held whole by every worker (``streamapp.App.SetGlobalTable`` makes it global:
    Faust's ``app.SetGlobalTable`` does not, and each worker held only its own partitions)."""
