"""Which keys of a Faust windowed table expire when: an index per changelog partition.

A Faust windowed table (``app.Table(...).tumbling(size, expires=...)``) deletes a window's keys
once the window's end is stale for its ``expires`` (``window.stale(end, now)``, by the wall
clock). `KeyExpiry` holds what that needs, per changelog partition of the table:

- the ends of the windows written, in a heap (earliest first), each end once;
- the keys of each (partition, end): ``(key, (start, end))``, as the table stores them;
- the latest window end written, which Faust's ``relative_to_now()`` and ``.now()`` read in an
  agent.

The table notes each write and deletion (`note_set`, `note_del`), takes what is due at each
cleanup (`take_due`), and after a recovery replaces a partition's part with the keys its store
holds (`rebuild`): keys recovered from RocksDB or the changelog are in it as if this process had
written them (faust-streaming/faust #385: Faust's own heap only ever holds keys written since
the process started, so recovered windows never expired).

Nothing here does I/O: the table (`streamapp.expiring_tables`) deletes and reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from heapq import heappop, heappush
from typing import Any

__all__ = ["KeyExpiry", "is_window_key", "window_key"]


def window_key(decoded: Any) -> Any:
    """A windowed key as the table holds it, from its decoded stored form: JSON gives lists,
    which are not hashable; the table's keys are ``(key, (start, end))`` tuples."""
    if isinstance(decoded, list):
        return tuple(tuple(part) if isinstance(part, list) else part for part in decoded)
    return decoded


def is_window_key(key: Any) -> bool:
    """Whether ``key`` has a windowed key's shape, ``(key, (start, end))``."""
    return isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], tuple)


class KeyExpiry:
    """The windows written per partition, by end, and the latest end (see the module)."""

    def __init__(self) -> None:
        #: partition -> heap of window ends with keys noted (each end once while noted).
        self.ends: dict[int, list[float]] = {}
        #: (partition, end) -> the keys of windows ending there.
        self.keys: dict[tuple[int, float], set[Any]] = {}
        #: partition -> the latest window end noted (0.0: none yet).
        self.latest: dict[int, float] = {}

    def note_set(self, key: Any, partition: int) -> None:
        """``key``, ``(key, (start, end))``, was written in ``partition``."""
        end = key[1][1]
        where = (partition, end)
        keys = self.keys.get(where)
        if keys is None:
            keys = self.keys[where] = set()
            heappush(self.ends.setdefault(partition, []), end)
        keys.add(key)
        if end > self.latest.get(partition, 0.0):
            self.latest[partition] = end

    def note_del(self, key: Any, partition: int) -> None:
        """``key`` was deleted from ``partition``: nothing to expire for it any more."""
        keys = self.keys.get((partition, key[1][1]))
        if keys is not None:
            keys.discard(key)

    def latest_end(self, partition: int) -> float:
        """The latest window end noted in ``partition`` (0.0 if none)."""
        return self.latest.get(partition, 0.0)

    def take_due(self, stale: Callable[[float], bool]) -> list[tuple[int, list[Any]]]:
        """Remove and return the keys of every window whose end is ``stale``: per partition,
        earliest end first, one ``(partition, keys)`` per end that still has keys."""
        due: list[tuple[int, list[Any]]] = []
        for partition, ends in self.ends.items():
            while ends and stale(ends[0]):
                end = heappop(ends)
                keys = self.keys.pop((partition, end), None)
                if keys:
                    due.append((partition, sorted(keys, key=repr)))
        return due

    def rebuild(self, partitions: Iterable[int], held: Mapping[int, Iterable[Any]]) -> int:
        """Hold exactly the keys of ``held`` (partition -> its store's windowed keys), for the
        table's active ``partitions``: the others' are dropped, their latest end too. Returns
        how many keys are noted."""
        wanted = set(partitions)
        self.ends.clear()
        self.keys.clear()
        for partition in list(self.latest):
            if partition not in wanted:
                del self.latest[partition]
        count = 0
        for partition, keys in held.items():
            if partition not in wanted:
                continue
            for key in keys:
                self.note_set(key, partition)
                count += 1
        return count

    def __len__(self) -> int:
        """How many keys are noted, in every partition."""
        return sum(len(keys) for keys in self.keys.values())
