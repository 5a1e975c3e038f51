"""The temporal (as-of) stream-table join's rule over one key-value store: pure, no Faust, no I/O.

`TableHistory` keeps, per key, the table's *versions*: each table record of event time ``t``
starts a version valid from ``t`` until the next version's time (a ``None`` value is a deletion:
no value from ``t``). A stream record of event time ``t`` is joined with the version of its key
valid at ``t``: the value of the table record with the greatest event time at or before ``t``
(of two with the same time, the one processed last).

History is bounded: each partition has a *table clock*, the highest event time of the table
records seen in it, and a version is kept while a stream record not older than
``clock - history_ms`` could need it (until the clock passes its end by ``history_ms``); the
latest version of a key is kept until it is a deletion that old. A record more than
``history_ms`` behind the table clock is *late*, on either topic: a stream record's version may
be gone, and a table record's would change what versions dropped already stood for. It is not
joined or stored, is counted, and goes to the join's ``dead_letter_topic`` if it has one.

What the store holds, per partition ``p``:

* ``k/<key>``: the key's versions, ``[[from_ms, value], ...]`` oldest first (a plain
  `streamapp.joins.TableLookup` value, a string, reads as one version from the beginning of
  time, so a join given ``history_ms`` keeps its table);
* ``~clock/<p>``: the table clock; ``~late/<p>``: how many records were late;
* ``~live/<p>`` and ``~h/<p>/<bucket>``: the expiry index (`streamapp.slot_index`), the keys
  holding a version that will be dropped, by time bucket of when, so that dropping reads only
  the keys due.

Dropping never changes a join's result (a version is dropped only once every stream record that
could need it is late), so when the sweeps run does not matter.
"""

from __future__ import annotations

import bisect
from collections.abc import MutableMapping
from typing import Any

from streamapp.joins.core import ExpiryIndex
from streamapp.joins.outcome import Outcome
from streamapp.joins.window import JoinKind
from streamapp.slot_index import SlotIndex

__all__ = ["TableHistory"]

Store = MutableMapping[str, Any]

KEY_PREFIX = "k/"
#: Before any event time: the start of a version that holds a value from the beginning.
BEGINNING = -(2**62)
#: Where the store lists the keys holding a version to drop, by time bucket.
HISTORY = SlotIndex("~h")


def _clock_key(p: int) -> str:
    return f"~clock/{p}"


def _late_key(p: int) -> str:
    return f"~late/{p}"


def versions_of(raw: Any) -> list[list[Any]]:
    """A key's versions as stored (``[[from_ms, value], ...]``), or as a plain table stores its
    latest value (one version from the beginning); ``[]`` for None."""
    if raw is None:
        return []
    if isinstance(raw, list):
        return [list(v) for v in raw]
    return [[BEGINNING, raw]]


class TableHistory:
    """A table's versions per key for ``history_ms``, and the as-of lookup (see the module).

    ``kind``: ``"inner"`` (a stream record with no value is not emitted) or ``"left"`` (emitted
    with None); ``store``: a table in a worker, a dict in tests; ``index``: the time buckets in
    which versions are dropped (by default a sixteenth of ``history_ms``). Raises ValueError for
    an outer join or a negative ``history_ms``.
    """

    def __init__(
        self,
        kind: JoinKind | str,
        store: Store,
        history_ms: int,
        *,
        index: ExpiryIndex | None = None,
    ) -> None:
        self.kind = JoinKind(kind)
        if self.kind is JoinKind.OUTER:
            raise ValueError("a stream-table join is inner or left")
        if history_ms < 0:
            raise ValueError(f"history_ms must be >= 0, got {history_ms}")
        self.store = store
        self.history_ms = history_ms
        self.index = index or ExpiryIndex(max(1, history_ms // 16))
        # partition -> the clock value at which a sweep can next find a bucket due (None:
        # none live); dropped by `forget` when the store may have changed under it.
        self._sweep_at: dict[int, int | None] = {}

    def forget(self) -> None:
        """Drop what is cached from the store (after a rebalance, or a batch not written)."""
        self._sweep_at.clear()

    # -- reading --

    def clock(self, partition: int) -> int | None:
        """The partition's table clock, None before its first table record."""
        raw = self.store.get(_clock_key(partition))
        return None if raw is None else int(raw)

    def versions(self, key: str) -> list[tuple[int, Any]]:
        """The key's versions held: (from_ms, value or None), oldest first."""
        return [(int(f), v) for f, v in versions_of(self.store.get(KEY_PREFIX + key))]

    def late_count(self, partition: int) -> int:
        """How many records of ``partition`` (of either topic) were late."""
        return int(self.store.get(_late_key(partition), 0))

    # -- a table record --

    def update(self, partition: int, key: str, time_ms: int, value: Any) -> Outcome:
        """A table record of event time ``time_ms``: ``value`` from then on (None: deleted).

        Returns ``ACCEPTED``, or ``LATE`` (nothing stored) for one more than ``history_ms``
        behind the table clock."""
        clock = self.clock(partition)
        if clock is not None and time_ms < clock - self.history_ms:
            return Outcome.LATE
        versions = versions_of(self.store.get(KEY_PREFIX + key))
        froms = [int(v[0]) for v in versions]
        at = bisect.bisect_left(froms, time_ms)
        if at < len(versions) and froms[at] == time_ms:
            versions[at] = [time_ms, value]  # the later record of one time wins
        else:
            versions.insert(at, [time_ms, value])
        if clock is None or time_ms > clock:
            clock = time_ms
            self.store[_clock_key(partition)] = clock
        # The versions whose end this record set or moved: the one before it, and itself (a
        # deletion that is the latest ends where it starts).
        for i in (at - 1, at):
            if 0 <= i < len(versions) - 1:
                ends = int(versions[i + 1][0])
                self._index(partition, key, ends + self.history_ms - 1)
        if at == len(versions) - 1 and value is None:
            self._index(partition, key, time_ms + self.history_ms - 1)
        self._put(key, self._kept(versions, clock))
        return Outcome.ACCEPTED

    # -- a stream record --

    def lookup(self, partition: int, key: str, time_ms: int) -> tuple[Outcome, Any]:
        """A stream record of event time ``time_ms``: ``(ACCEPTED, value)`` with the value valid
        then, ``(UNMATCHED, None)`` when there is none (deleted, or before the first version),
        or ``(LATE, None)`` when it is older than the history kept."""
        clock = self.clock(partition)
        if clock is not None and time_ms < clock - self.history_ms:
            return Outcome.LATE, None
        versions = versions_of(self.store.get(KEY_PREFIX + key))
        at = bisect.bisect_right([int(v[0]) for v in versions], time_ms) - 1
        value = versions[at][1] if at >= 0 else None
        if value is None:
            return Outcome.UNMATCHED, None
        return Outcome.ACCEPTED, value

    def emits(self, outcome: Outcome) -> bool:
        """Whether a stream record with ``outcome`` is emitted (a left join emits unmatched
        ones with None)."""
        return outcome is Outcome.ACCEPTED or (
            outcome is Outcome.UNMATCHED and self.kind is JoinKind.LEFT
        )

    def count_late(self, partition: int) -> None:
        """Count a late record (after its dead letter, if any, was delivered)."""
        self.store[_late_key(partition)] = self.late_count(partition) + 1

    # -- dropping old versions --

    def expire(self, partition: int) -> int:
        """Drop the versions of ``partition`` that no stream record can need any more; returns
        how many keys it rewrote."""
        clock = self.clock(partition)
        if clock is None:
            return 0
        at = self._sweep_at.get(partition, BEGINNING)
        if at is None or clock < at:
            return 0
        live = HISTORY.live(self.store, partition)
        due = [b for b in live if self.index.due_at(b) <= clock]
        rest = live[len(due) :]
        rewritten = 0
        if due:
            keys = {k for b in due for k in HISTORY.keys(self.store, partition, b)}
            for key in sorted(keys):
                raw = self.store.get(KEY_PREFIX + key)
                versions = versions_of(raw)
                kept = self._kept(versions, clock)
                if kept != versions:
                    self._put(key, kept)
                    rewritten += 1
            HISTORY.drop(self.store, partition, due, rest)
        self._sweep_at[partition] = self.index.due_at(rest[0]) if rest else None
        return rewritten

    def _kept(self, versions: list[list[Any]], clock: int) -> list[list[Any]]:
        # Version i, valid until version i + 1 starts, is needed while a stream record that is
        # not late (at or after clock - history) can fall in it.
        kept = [
            v
            for i, v in enumerate(versions)
            if i == len(versions) - 1 or int(versions[i + 1][0]) + self.history_ms > clock
        ]
        if not kept:
            return kept
        last = kept[-1]
        if last[1] is None and int(last[0]) + self.history_ms <= clock:
            # A deletion no stream or table record that is not late can come before: the
            # same as nothing (the versions before it have ended by then too).
            return []
        return kept

    def _put(self, key: str, versions: list[list[Any]]) -> None:
        if versions:
            self.store[KEY_PREFIX + key] = versions
        elif KEY_PREFIX + key in self.store:
            del self.store[KEY_PREFIX + key]

    def _index(self, partition: int, key: str, expires_after_ms: int) -> None:
        bucket = self.index.bucket_of(expires_after_ms)
        HISTORY.add(self.store, partition, bucket, key)
        if partition in self._sweep_at:
            at = self._sweep_at[partition]
            due = self.index.due_at(bucket)
            self._sweep_at[partition] = due if at is None else min(at, due)
