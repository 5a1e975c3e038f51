"""A store's reads and writes held for one batch: pure, no Faust, no I/O.

A join handling a batch of records reads and writes the same few entries over and over: the
side's clock and last offset seen (``~clock/<p>``, ``~seen/<p>``), the expiry index's buckets,
the keys the batch's records share. Against a Faust table each write is a RocksDB write and a
changelog record, each read a RocksDB read and a JSON decode. `WriteBack` keeps what the batch
reads and writes in memory and writes each changed entry to the store once, at
`WriteBack.write_through`, so a batch costs one changelog record per entry it changed rather
than one per write.

Values are never changed in place (the joins build new lists), so a value read once can be
handed out again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

__all__ = ["WriteBack"]

Store = MutableMapping[str, Any]


class _Deleted:
    """What a key deleted in the batch holds until the batch is written through."""

    def __repr__(self) -> str:
        return "<deleted>"


_DELETED = _Deleted()
_MISSING = object()


class WriteBack(MutableMapping[str, Any]):
    """``store`` with the batch's reads cached and its writes and deletes held back.

    Reads see the batch's own writes. `write_through` applies the held writes to ``store``,
    the keys ``last`` picks after all others (a join's ``~seen`` entries: on a changelog
    partition, where order is kept, a record is never marked seen before its entries are
    written), and empties the cache: the next batch reads ``store`` afresh.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._read: dict[str, Any] = {}  # key -> the store's value (or _MISSING)
        self._written: dict[str, Any] = {}  # key -> the batch's value (or _DELETED)

    def _value(self, key: str) -> Any:
        written = self._written.get(key, _MISSING)
        if written is not _MISSING:
            return _MISSING if written is _DELETED else written
        read = self._read.get(key, _MISSING)
        if read is _MISSING and key not in self._read:
            read = self.store.get(key, _MISSING)
            self._read[key] = read
        return read

    def __getitem__(self, key: str) -> Any:
        value = self._value(key)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self._value(key)
        return default if value is _MISSING else value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._value(key) is not _MISSING

    def __setitem__(self, key: str, value: Any) -> None:
        self._written[key] = value

    def __delitem__(self, key: str) -> None:
        if self._value(key) is _MISSING:
            raise KeyError(key)
        self._written[key] = _DELETED

    def __iter__(self) -> Iterator[str]:
        for key in self.store:
            if key not in self._written:
                yield key
        for key, value in self._written.items():
            if value is not _DELETED:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    @property
    def pending(self) -> int:
        """How many entries `write_through` will write (or delete)."""
        return len(self._written)

    def write_through(self, last: Callable[[str], bool] = lambda key: False) -> None:
        """Write the held changes to the store (the keys ``last`` picks after the others)."""
        written, self._written, self._read = self._written, {}, {}
        later = [key for key in written if last(key)]
        for key, value in written.items():
            if not last(key):
                self._apply(key, value)
        for key in later:
            self._apply(key, written[key])

    def discard(self) -> None:
        """Forget the held changes and the cache (a batch that did not finish)."""
        self._written.clear()
        self._read.clear()

    def _apply(self, key: str, value: Any) -> None:
        if value is _DELETED:
            if key in self.store:
                del self.store[key]
        else:
            self.store[key] = value
