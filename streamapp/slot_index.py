"""The expiry index the windowed state machines keep in their store, and a sweep planned on it.

The windowed aggregate (`streamapp.aggregates.core`: one slot a window start) and the
stream-stream join (`streamapp.joins.core`: one slot a time bucket of expiry) both hold, per
partition ``p``, the slots still held (``~live/<p>``, sorted) and, per slot, the keys holding
something in it (``<prefix>/<p>/<slot>``), so a sweep reads only the slots that are due. The
index is in the store, so in the changelog and in RocksDB: it comes back after a restart or a
move with the data it indexes. Pure: no Faust, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

Store = MutableMapping[str, Any]


@dataclass(frozen=True)
class SlotIndex:
    """Slots (ints) per partition, and the keys listed under each; ``prefix`` names the slot
    entries (their names are the stores' format: a store written before reads the same)."""

    prefix: str

    @staticmethod
    def live_key(partition: int) -> str:
        return f"~live/{partition}"

    def slot_key(self, partition: int, slot: int) -> str:
        return f"{self.prefix}/{partition}/{slot}"

    def live(self, store: Store, partition: int) -> list[int]:
        """The slots of ``partition`` still held, in order."""
        return list(store.get(self.live_key(partition)) or [])

    def keys(self, store: Store, partition: int, slot: int) -> list[str]:
        return list(store.get(self.slot_key(partition, slot)) or ())

    def add(self, store: Store, partition: int, slot: int, key: str) -> None:
        # A list of keys per slot: one write per key entering a slot. Enough for thousands of
        # keys per slot and partition; a sweep reads one entry per slot due.
        slot_key = self.slot_key(partition, slot)
        listed = store.get(slot_key)
        if listed is None:
            live = self.live(store, partition)
            if slot not in live:
                store[self.live_key(partition)] = sorted([*live, slot])
            store[slot_key] = [key]
        elif key not in listed:
            store[slot_key] = [*listed, key]

    def drop(self, store: Store, partition: int, due: Iterable[int], rest: list[int]) -> None:
        """Forget the slots ``due`` (swept); ``rest`` are the ones still held."""
        for slot in due:
            slot_key = self.slot_key(partition, slot)
            if slot_key in store:
                del store[slot_key]
        store[self.live_key(partition)] = rest


@dataclass
class PlannedSweep:
    """What a sweep found; nothing changes in the stores until `apply`, which the wiring runs
    once what the sweep emits is delivered (a crash in between emits it again, never loses it).
    """

    _steps: list[Callable[[], None]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self._steps

    def then(self, step: Callable[[], None]) -> None:
        """Run ``step`` on `apply`."""
        self._steps.append(step)

    def apply(self) -> None:
        for step in self._steps:
            step()
        self._steps.clear()
