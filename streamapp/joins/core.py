"""The stream-stream join's state machine over two key-value stores: pure, no Faust, no I/O.

`JoinProcessor` keeps each side's records in its own store (a ``MutableMapping``: a Faust
table in a worker, a dict in tests), one partition at a time, and decides what each arriving
record emits. The wiring (`streamapp.joins.stream_stream`) only decodes, sends and flushes.

What one side's store holds, per partition ``p`` (every value JSON-friendly):

* ``k/<key>``: the records of that key still able to match, as ``[offset, time_ms, value,
  matched, id, partners]`` lists (``partners``: the offsets of the other side's records its
  own processing paired it with; entries stored before the join kept them read as
  ``[offset, time_ms, value, matched]`` or ``[..., matched, id]``), in arrival order;
* ``~clock/<p>``: the side's clock (highest event time seen, never goes back);
* ``~seen/<p>``: the highest source offset processed, which tells a replay from a new record;
* ``~out/<p>``: the highest source offset whose output is known delivered (noted when a sweep
  is applied, after the producer flush);
* ``~late/<p>``: how many late records the side had;
* ``~live/<p>`` and ``~b/<p>/<bucket>``: the expiry index, keys listed by the time bucket in
  which their records expire, so a sweep reads only what has expired (see `ExpiryIndex`,
  `streamapp.slot_index`).

Partition numbers are part of the bookkeeping keys: a Faust table looks a key that is missing
in the current partition up in the others.

Replays (at-least-once). A record whose offset is at or below ``~seen``, or that is still
stored (``~seen`` is written after the entries, so a crash can come between them), was
processed before a crash, and its effects on the stores may or may not have survived, with
those of the records after it: the stored clocks may have moved past its expiry or its
partners'. If it is still stored, expired or not, it emits again the pairs its own processing
emitted, with the partners still stored (the first emission may have been lost; a duplicate is
allowed), never a pair its first processing would not have emitted: whatever the clocks did
since, and however the two topics interleave after the restart. If it is not stored, it was
late (its dead letter was delivered before ``~seen`` moved, see `JoinProcessor.count_late`),
a duplicate, or it expired, and what expires goes only after everything sent before it was
delivered (the wiring flushes the producer between `JoinProcessor.plan_expiry` and
`Expiry.apply`): either way its output is out already, and it is skipped. For that, a sweep
keeps what a record still to be processed again needs, although expired: the records handled
before the crash after the last sweep applied (``~out``), which this processor has not handled
again (see `JoinProcessor.owed_after`), and their partners. They go at the first sweep after
their replay; a side that gets no record after a restart or a move keeps its own (those
handled after the last sweep applied) until it does. An entry
stored before the join kept its partners is paired again with what is held and not expired at
the current clocks.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, replace
from typing import Any

from streamapp.joins.outcome import Arrival, Expiry, Outcome
from streamapp.joins.window import JoinKind, JoinWindow, Side
from streamapp.joins.write_back import WriteBack
from streamapp.slot_index import SlotIndex

__all__ = [
    "Arrival",
    "Entry",
    "Expiry",
    "ExpiryIndex",
    "JoinProcessor",
    "Outcome",
    "Pair",
    "Store",
    "held_entries",
]

Store = MutableMapping[str, Any]

KEY_PREFIX = "k/"


@dataclass(frozen=True)
class Entry:
    """One record on one side: its source offset (its identity), event time and payload.

    ``id``: what the record is about, when the join is told (``left_id``/``right_id``): a
    second record with the id of one still stored on its side is a duplicate.
    """

    offset: int
    time_ms: int
    value: Any = None
    matched: bool = False
    id: str | None = None
    #: The source offsets of the other side's records its own processing paired it with,
    #: which its replay pairs it with again; None in entries stored before the join kept them.
    partners: tuple[int, ...] | None = None

    def to_json(self) -> list[Any]:
        listed = [self.offset, self.time_ms, self.value, int(self.matched)]
        if self.partners is not None:
            return [*listed, self.id, list(self.partners)]
        return listed if self.id is None else [*listed, self.id]

    @classmethod
    def from_json(cls, raw: list[Any]) -> Entry:
        record_id = str(raw[4]) if len(raw) > 4 and raw[4] is not None else None
        partners = tuple(int(o) for o in raw[5]) if len(raw) > 5 else None
        return cls(int(raw[0]), int(raw[1]), raw[2], bool(raw[3]), record_id, partners)


@dataclass(frozen=True)
class Pair:
    """One output of the join; ``left`` or ``right`` is None for an unmatched record."""

    key: str
    left: Entry | None
    right: Entry | None


@dataclass(frozen=True)
class ExpiryIndex:
    """Time buckets of ``width_ms``: which keys may hold records expiring when.

    A record expiring after clock value ``e`` is listed in bucket ``e // width_ms``; a bucket
    is swept once the driving clock reaches its end, when all its records have expired. So a
    record leaves the store (and, unmatched, is emitted by a left or outer join) up to
    ``width_ms`` after the clock passed its expiry time: wider buckets mean fewer index
    writes and later emission; 1 ms is exact.
    """

    width_ms: int = 100

    def __post_init__(self) -> None:
        if self.width_ms <= 0:
            raise ValueError(f"expiry bucket width must be > 0, got {self.width_ms}")

    def bucket_of(self, expires_after_ms: int) -> int:
        return expires_after_ms // self.width_ms

    def due_at(self, bucket: int) -> int:
        # Bucket b holds expiry times in [b*w, (b+1)*w); a record expires once clock > its
        # time, so all of them have once clock >= (b+1)*w.
        return (bucket + 1) * self.width_ms

    def swept(self, expires_after_ms: int, clock_ms: int) -> bool:
        """Whether a sweep at ``clock_ms`` has dropped a record expiring after ``expires_after_ms``.

        That is: the record has expired, rounded up to the end of its bucket. With a width of
        1 ms a record goes exactly when the clock passes its expiry time.
        """
        return self.due_at(self.bucket_of(expires_after_ms)) <= clock_ms


def _clock_key(p: int) -> str:
    return f"~clock/{p}"


def _seen_key(p: int) -> str:
    return f"~seen/{p}"


def _out_key(p: int) -> str:
    return f"~out/{p}"


def _late_key(p: int) -> str:
    return f"~late/{p}"


def _is_seen_key(key: str) -> bool:
    return key.startswith("~seen/")


#: Where a side's store lists its keys by bucket of expiry (the buckets are `ExpiryIndex`'s).
BUCKETS = SlotIndex("~b")


def _entries(store: Store, key: str) -> list[Entry]:
    return [Entry.from_json(e) for e in store.get(KEY_PREFIX + key) or ()]


def held_entries(store_key: str, value: Any) -> list[Entry]:
    """The records one key-value pair of a side's store holds (none for bookkeeping keys).

    For readers of a join table's changelog: ``store_key`` is the table key, ``value`` its
    latest value (None once deleted).
    """
    if not store_key.startswith(KEY_PREFIX) or value is None:
        return []
    return [Entry.from_json(e) for e in value]


def _put(store: Store, key: str, entries: Iterable[Entry]) -> None:
    listed = [e.to_json() for e in entries]
    if listed:
        store[KEY_PREFIX + key] = listed
    elif KEY_PREFIX + key in store:
        del store[KEY_PREFIX + key]


class JoinProcessor:
    """A windowed stream-stream join (inner, left or outer) over two stores."""

    def __init__(
        self,
        window: JoinWindow,
        kind: JoinKind,
        left: Store,
        right: Store,
        *,
        index: ExpiryIndex | None = None,
    ) -> None:
        self.window = window
        self.kind = kind
        self.stores = {Side.LEFT: left, Side.RIGHT: right}
        self.index = index or ExpiryIndex()
        # (side, partition) -> the driving clock value at which a sweep can next find a bucket
        # due (None: none live). Saves reading the index on every record; `forget` drops it
        # when the stores may have changed under it (a rebalance).
        self._sweep_at: dict[tuple[Side, int], int | None] = {}
        # (side, partition) -> the keys the expiry index lists: every key holding records is
        # listed (each record under the bucket it expires in, until that bucket is swept), so
        # a key not among them holds nothing and is not read. Most keys a record looks up
        # hold nothing yet (a new auction, on both sides): each saves a store read. Read from
        # the index when first needed; dropped with ``_sweep_at``.
        self._listed: dict[tuple[Side, int], set[str]] = {}
        # (side, partition) -> the highest source offset this processor has handled: what was
        # sent for those records is delivered at the next producer flush. Kept across
        # rebalances (a record handled here was handled, whoever holds the partition now).
        self._done: dict[tuple[Side, int], int] = {}

    def forget(self) -> None:
        self._sweep_at.clear()
        self._listed.clear()

    def write_through(self) -> None:
        """Over `WriteBack` stores (a join over batches): write a batch's changes to the
        stores, each side's ``~seen`` entries after the rest (so that, in the side's changelog,
        a record is marked seen only after what it stored)."""
        for store in self.stores.values():
            if isinstance(store, WriteBack):
                store.write_through(last=_is_seen_key)

    def discard(self) -> None:
        """Over `WriteBack` stores: forget a batch that did not finish (nothing is written)."""
        for store in self.stores.values():
            if isinstance(store, WriteBack):
                store.discard()
        self._sweep_at.clear()
        self._listed.clear()
        self._done.clear()

    # -- reading --

    def clock(self, side: Side, partition: int) -> int:
        return int(self.stores[side].get(_clock_key(partition), -1))

    def late_count(self, side: Side, partition: int) -> int:
        return int(self.stores[side].get(_late_key(partition), 0))

    def stored(self, side: Side, key: str) -> list[Entry]:
        return _entries(self.stores[side], key)

    def _held(self, side: Side, partition: int, key: str) -> list[Entry]:
        """``key``'s records on ``side``, read only if the expiry index lists the key."""
        if key not in self._listed_keys(side, partition):
            return []
        return _entries(self.stores[side], key)

    def _listed_keys(self, side: Side, partition: int) -> set[str]:
        where = (side, partition)
        listed = self._listed.get(where)
        if listed is None:
            store = self.stores[side]
            listed = {
                key
                for bucket in BUCKETS.live(store, partition)
                for key in BUCKETS.keys(store, partition, bucket)
            }
            self._listed[where] = listed
        return listed

    # -- one record --

    def process(self, side: Side, partition: int, key: str, entry: Entry) -> Arrival[Pair]:
        where = (side, partition)
        self._done[where] = max(self._done.get(where, -1), entry.offset)
        own = self.stores[side]
        other = self.stores[side.other]
        own_entries = self._held(side, partition, key)
        seen = int(own.get(_seen_key(partition), -1))
        # The record itself still stored is a replay, whatever ``~seen`` says: ``~seen`` is
        # written after the entries (`write_through`), so a crash between the two leaves the
        # record stored but not seen. Taken for a new record, it met its own entry and was
        # reported a duplicate of itself, and its pairs, whose first emission died with the
        # crash, were never emitted again (the demo lost an attribution so). Looked up among
        # all the stored entries, expired or not: the clocks may have moved past its expiry
        # after it was processed, and until a sweep drops it its output may not be out.
        earlier = next((e for e in own_entries if e.offset == entry.offset), None)
        if earlier is not None or entry.offset <= seen:
            if earlier is None:
                return Arrival(Outcome.SKIPPED)
            again = self._pairs_again(side, partition, key, earlier)
            if entry.offset > seen:
                own[_seen_key(partition)] = entry.offset
            return Arrival(Outcome.REPLAY, again)
        # What a sweep at the current clocks drops counts as gone, swept yet or not: a join over
        # batches sweeps once per batch (`plan_expiry` when it ends), and its records see what
        # they would see were the sweep run after each record. Only duplicates can tell: an
        # entry that has expired matches no record that is not late (module docs).
        held = self._unswept(side, partition, own_entries)
        clock = self.clock(side, partition)
        if self.window.is_late(entry.time_ms, clock):
            # Nothing is written: `count_late` does it once the dead letter is out.
            return Arrival(Outcome.LATE)
        if entry.id is not None and any(e.id == entry.id for e in held):
            own[_seen_key(partition)] = entry.offset
            return Arrival(Outcome.DUPLICATE)
        if entry.time_ms > clock:
            own[_clock_key(partition)] = entry.time_ms
        other_entries = self._held(side.other, partition, key)
        pairs: list[Pair] = []
        partners: list[int] = []
        changed = False
        for i, o in enumerate(other_entries):
            if not self._matches(side, entry, o):
                continue
            pairs.append(self._pair(key, side, entry, o))
            partners.append(o.offset)
            if not o.matched:
                other_entries[i] = replace(o, matched=True)
                changed = True
        if changed and self.kind.emits_unmatched(side.other):
            _put(other, key, other_entries)
        stored = replace(entry, matched=bool(pairs), partners=tuple(partners))
        _put(own, key, [*own_entries, stored])
        self._index(side, partition, key, self.window.expires_after(side, entry.time_ms))
        own[_seen_key(partition)] = entry.offset
        return Arrival(Outcome.ACCEPTED, tuple(pairs))

    def _pairs_again(
        self, side: Side, partition: int, key: str, earlier: Entry
    ) -> tuple[Pair, ...]:
        """The pairs the replay of the record stored as ``earlier`` emits again.

        Those its own processing emitted, with the partners still stored (one that is gone was
        swept once its pair was delivered), whatever the clocks have done since: the stored
        clocks may be those of records processed after it before the crash. An entry stored
        before the join kept its partners is paired with what is held at the current clocks.
        """
        others = self._held(side.other, partition, key)
        if earlier.partners is None:
            others = self._unswept(side.other, partition, others)
            return tuple(
                self._pair(key, side, earlier, o) for o in others if self._matches(side, earlier, o)
            )
        partners = set(earlier.partners)
        return tuple(self._pair(key, side, earlier, o) for o in others if o.offset in partners)

    def _unswept(self, side: Side, partition: int, entries: list[Entry]) -> list[Entry]:
        """``entries`` of ``side`` less those a sweep at the driving clock drops."""
        if not entries:
            return entries
        driving = self.clock(side.other, partition)
        return [
            e
            for e in entries
            if not self.index.swept(self.window.expires_after(side, e.time_ms), driving)
        ]

    def count_late(self, side: Side, partition: int, offset: int) -> None:
        """Count a late record as handled (after its dead letter, if any, was delivered)."""
        own = self.stores[side]
        own[_late_key(partition)] = int(own.get(_late_key(partition), 0)) + 1
        if offset > int(own.get(_seen_key(partition), -1)):
            own[_seen_key(partition)] = offset

    def _matches(self, side: Side, entry: Entry, other: Entry) -> bool:
        if side is Side.LEFT:
            return self.window.matches(entry.time_ms, other.time_ms)
        return self.window.matches(other.time_ms, entry.time_ms)

    @staticmethod
    def _pair(key: str, side: Side, entry: Entry, other: Entry) -> Pair:
        return Pair(key, entry, other) if side is Side.LEFT else Pair(key, other, entry)

    # -- expiry --

    def _index(self, side: Side, partition: int, key: str, expires_after_ms: int) -> None:
        store = self.stores[side]
        bucket = self.index.bucket_of(expires_after_ms)
        BUCKETS.add(store, partition, bucket, key)
        where = (side, partition)
        listed = self._listed.get(where)
        if listed is not None:
            listed.add(key)
        if where in self._sweep_at:
            at = self._sweep_at[where]
            due = self.index.due_at(bucket)
            self._sweep_at[where] = due if at is None else min(at, due)

    def plan_expiry(self, partition: int) -> Expiry[Pair]:
        """The records of ``partition`` that the clocks have expired, on both sides.

        Returns the unmatched records the join kind emits; the stores change on `apply`, which
        also notes, per side, the offset up to which what was sent is delivered (``~out``).
        Kept although expired: what a record still to be processed again needs (`owed_after`).
        """
        expiry: Expiry[Pair] = Expiry()
        unmatched: list[Pair] = []
        for side in (Side.LEFT, Side.RIGHT):
            driving = self.clock(side.other, partition)
            unmatched.extend(self._plan_side(side, partition, driving, expiry))
        expiry.emitted = tuple(unmatched)
        if not expiry.empty:
            expiry.then(lambda: self._note_delivered(partition))
        return expiry

    def owed_after(self, side: Side, partition: int) -> int | None:
        """The offset past which ``side``'s stored records may still owe their pairs: None if
        none may.

        Those are records handled before a crash (by this worker or the partition's earlier
        owner) after the last sweep applied, which this processor has not handled again yet:
        what they sent may have died with the crash, and they will be processed again, as
        replays. Until then their entries, and the partners their pairs are with, are kept.
        """
        store = self.stores[side]
        seen = int(store.get(_seen_key(partition), -1))
        delivered = max(
            int(store.get(_out_key(partition), -1)), self._done.get((side, partition), -1)
        )
        return delivered if delivered < seen else None

    def _note_delivered(self, partition: int) -> None:
        # Applied after the producer flush: what the records handled here sent is out.
        for side in (Side.LEFT, Side.RIGHT):
            done = self._done.get((side, partition))
            store = self.stores[side]
            if done is not None and done > int(store.get(_out_key(partition), -1)):
                store[_out_key(partition)] = done

    def _plan_side(
        self, side: Side, partition: int, clock: int, expiry: Expiry[Pair]
    ) -> list[Pair]:
        where = (side, partition)
        if where in self._sweep_at:
            at = self._sweep_at[where]
            if at is None or clock < at:
                return []
        store = self.stores[side]
        live = BUCKETS.live(store, partition)
        due = [b for b in live if self.index.due_at(b) <= clock]
        rest = live[len(due) :]
        if not due:
            self._sweep_at[where] = self.index.due_at(rest[0]) if rest else None
            return []
        keys: list[str] = []
        for bucket in due:
            for key in BUCKETS.keys(store, partition, bucket):
                if key not in keys:
                    keys.append(key)
        owed = _Owed(self, side, partition)
        emit = self.kind.emits_unmatched(side)
        unmatched: list[Pair] = []
        updates: dict[str, list[Entry]] = {}
        retained: set[int] = set()  # due buckets listing entries kept for a replay
        for key in keys:
            entries = _entries(store, key)
            # By the bucket rule, not the exact one: what goes when does not depend on which
            # bucket happened to list the key.
            expired = [
                e
                for e in entries
                if self.index.swept(self.window.expires_after(side, e.time_ms), clock)
            ]
            kept = owed.kept(key, expired)
            retained.update(
                self.index.bucket_of(self.window.expires_after(side, e.time_ms)) for e in kept
            )
            keep = [e for e in entries if e not in expired or e in kept]
            if len(keep) == len(entries):
                continue
            updates[key] = keep
            if emit:
                for e in entries:
                    if not e.matched and e not in keep:
                        pair = Pair(key, e, None) if side is Side.LEFT else Pair(key, None, e)
                        unmatched.append(pair)
        dropped = [b for b in due if b not in retained]
        live_after = [b for b in live if b not in dropped]
        if not updates and not dropped:
            # Only entries kept for a replay are due: looked at again at each sweep (nothing
            # to apply, so nothing to flush), until their replays are done.
            self._sweep_at[where] = self.index.due_at(live_after[0])
            return []

        def apply() -> None:
            listed = self._listed.get(where)
            for key, keep in updates.items():
                _put(store, key, keep)
                if not keep and listed is not None:
                    # Held nothing more, so listed in no bucket left (each record is listed
                    # under its own bucket, and every record of a due bucket was dropped) but
                    # one kept for a replay, whose keys are read again anyway.
                    listed.discard(key)
            BUCKETS.drop(store, partition, dropped, live_after)
            self._sweep_at[where] = self.index.due_at(live_after[0]) if live_after else None

        expiry.then(apply)
        return unmatched


class _Owed:
    """Which expired entries of one side a sweep keeps for records still to be replayed: the
    side's own records past `JoinProcessor.owed_after`, and the partners of the other side's."""

    def __init__(self, processor: JoinProcessor, side: Side, partition: int) -> None:
        self.own_after = processor.owed_after(side, partition)
        self.other_after = processor.owed_after(side.other, partition)
        self.other_store = processor.stores[side.other]

    def kept(self, key: str, expired: list[Entry]) -> list[Entry]:
        if not expired or (self.own_after is None and self.other_after is None):
            return []
        partners: set[int] = set()
        if self.other_after is not None:
            for e in _entries(self.other_store, key):
                if e.offset > self.other_after and e.partners:
                    partners.update(e.partners)
        own_after = self.own_after
        return [
            e
            for e in expired
            if (own_after is not None and e.offset > own_after) or e.offset in partners
        ]
