"""Under exactly_once, when the tables' writes reach their stores: at the commit of the
transactions that made them.

A transactional store (`streamapp.runtime.stores`) holds each partition's writes apart, with
the source partitions whose records made them, until those records' transactions commit.
Each record's transaction is its source partition's (`streamapp.sending.sends`): the one
that carries its changelog records and commits its offset. So a commit that went through
commits, for each source partition in it, the writes its records made:

- a partition whose pending writes were all made by committed source partitions is stored,
  writes and the changelog offset of its last record in one write batch (`on_commit`); one
  that also holds writes of a source partition not committed yet waits for that one's
  commit (a commit of a few partitions only: a revocation's);
- the changelog offset of the last record of each changelog partition is kept from its
  delivery until then (Faust's ``persist_offset_on_commit``); one without writes pending
  beside it (its writes went to another partition's store: a table that partitions by key) is
  written once the transaction of its topic group and partition commits;
- a revocation commits what its partitions processed first; whatever they still have pending
  then was made by records whose transactions will never commit here (their producers stop,
  and the next owner's fences them), and is dropped (`on_revoked`), as is whatever a partition
  gained or no longer active has pending as a rebalance ends (`on_assigned`).

Between commits the pending writes take memory: `pending_bytes` is what the committer weighs
against ``eos_pending_writes_max_bytes`` to commit early (`streamapp.runtime.commits`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from faust.types import TP, AppT, CollectionT, StoreT

from streamapp.runtime.partitions_text import partitions_text
from streamapp.runtime.stores import RocksDBStore
from tables import store_guard

logger = logging.getLogger(__name__)


class StoreCommits:
    """The transactional stores of the app's tables, and the offsets waiting for a commit
    (see the module)."""

    def __init__(self, app: AppT, tables: Mapping[str, CollectionT]) -> None:
        self.app = app
        self.tables = tables
        #: Changelog partition -> (its store, the offset of its last record delivered), kept
        #: until the transaction that carried it commits.
        self.pending_offsets: dict[TP, tuple[StoreT[Any, Any], int]] = {}

    def transactional(self) -> Iterator[tuple[RocksDBStore, str]]:
        """Each table's transactional store, with its changelog topic."""
        for table in self.tables.values():
            store = store_guard.rocksdb_store(table)
            if isinstance(store, RocksDBStore) and store.transactional:
                yield store, store_guard.changelog_topic(table)

    def pending_bytes(self) -> int:
        """About the memory every transactional store's pending writes take."""
        return sum(store.pending_bytes() for store, _ in self.transactional())

    def persist_offset_on_commit(self, store: StoreT[Any, Any], tp: TP, offset: int) -> None:
        found = self.pending_offsets.get(tp)
        if found is None or offset > found[1]:
            self.pending_offsets[tp] = (store, offset)

    def on_commit(self, offsets: MutableMapping[TP, int]) -> None:
        """The transactions of the source partitions in ``offsets`` committed: store what they
        wrote, with the offsets of their changelog records."""
        committed = set(offsets)
        waiting: set[TP] = set()
        for store, topic in self.transactional():
            for partition in store.committed_partitions(committed):
                found = self.pending_offsets.pop(TP(topic, partition), None)
                store.commit_pending(partition, None if found is None else found[1])
            waiting.update(TP(topic, partition) for partition in store.pending_partitions())
        if not self.pending_offsets:
            return
        groups = {
            (group, tp.partition)
            for tp in offsets
            if (group := self._topic_group(tp.topic)) is not None
        }
        for tp, (offset_store, offset) in list(self.pending_offsets.items()):
            if tp not in waiting and (self._topic_group(tp.topic), tp.partition) in groups:
                offset_store.set_persisted_offset(tp, offset)
                del self.pending_offsets[tp]

    def _topic_group(self, topic: str) -> int | None:
        try:
            return int(self.app.assignor.group_for_topic(topic))
        except KeyError:  # a topic the assignor has not grouped (not subscribed)
            return None

    def on_revoked(self, revoked: set[TP]) -> None:
        """``revoked`` was given up, after its last commit: what its records still have pending
        (and the partitions of its changelogs) is dropped."""
        for store, topic in self.transactional():
            doomed = [
                partition
                for partition, sources in store.pending_partitions().items()
                if sources & revoked or TP(topic, partition) in revoked
            ]
            self._drop(store, topic, doomed, "given up before their transactions committed")

    def on_assigned(self, assigned: set[TP], actives: set[TP], gained: set[TP]) -> None:
        """A rebalance ends with ``actives`` (changelog partitions) active here, ``gained``
        among them new: a partition gained starts from what its store holds, and one not
        active has no transaction here."""
        for tp in [tp for tp in self.pending_offsets if tp not in assigned]:
            del self.pending_offsets[tp]
        for store, topic in self.transactional():
            doomed = [
                partition
                for partition in store.pending_partitions()
                if TP(topic, partition) not in actives or TP(topic, partition) in gained
            ]
            self._drop(store, topic, doomed, "not active here")

    def _drop(self, store: RocksDBStore, topic: str, partitions: list[int], why: str) -> None:
        if not partitions:
            return
        tps = {TP(topic, partition) for partition in partitions}
        for tp in tps:
            self.pending_offsets.pop(tp, None)
        dropped = store.drop_pending(partitions)
        logger.info(
            "streamapp: %d uncommitted writes of %s dropped: %s",
            dropped,
            partitions_text(tps),
            why,
        )
