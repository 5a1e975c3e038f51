"""Damaged local state: moved aside, never deleted, and restored from the changelog.

A store is only a cache of its changelog partition, so a store that cannot serve as one is set
aside and Faust builds a fresh one by replaying the changelog. Four cases, each found before
Faust would trip on it, each reported with one warning naming the table and the partition:

- a store that cannot be opened or read (garbage in ``CURRENT``, a truncated ``.sst``, a missing
  ``MANIFEST``): found as the worker starts, before Faust opens any store (`set_aside_unreadable`),
  and again whenever Faust opens a store after that (`streamapp.runtime.tables`). Faust itself
  would raise RocksDB's ``Corruption`` on every restart;
- a store whose persisted offset lies beyond its changelog's end, as when the changelog topic was
  deleted and recreated (`offset_beyond_end`, applied in `streamapp.runtime.tables`). Faust's
  recovery raises ``ConsistencyError`` on every restart; where its check does not fire (a
  changelog holding one record) it silently seeks past the records it lacks;
- a store whose changelog lost records it still needs, as after retention or DeleteRecords moved
  the log start past its offset (`records_missing_before_start`, applied in
  `streamapp.runtime.tables`). Faust would seek to the log start and lay what remains
  over state the deleted records had overwritten;
- a store of a partition the changelog no longer has (`beyond_partition_count`).

A set-aside store goes to ``<tabledir>/damaged/<store name>.<UTC timestamp>``, kept for
inspection; nothing here deletes it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from tables.inventory import StoreOnDisk, read_persisted_offset, scan_stores
from tables.ownership import OWNERSHIP_FILE, Ownership, load_ownership, save_ownership

logger = logging.getLogger(__name__)

DAMAGED_DIR = "damaged"


def stores_of(tabledir: Path, tables: Iterable[str]) -> list[StoreOnDisk]:
    """The stores in ``tabledir`` of the named tables, by table and partition."""
    names = set(tables)
    return [store for store in scan_stores(tabledir) if store.table in names]


def one_line(exc: BaseException) -> str:
    """``exc`` as one log line: RocksDB's messages span lines (``... may be corrupted.``)."""
    return re.sub(r"\s+", " ", str(exc)).strip() or type(exc).__name__


def unreadable_because(path: Path) -> str | None:
    """Why the store at ``path`` cannot be used, or None when it opens and reads.

    Opened read-only, as the inventory does: no lock is taken and nothing on disk changes. An
    empty directory is no damage: Faust creates the store in it. RocksDB checks at open that
    ``CURRENT`` names a ``MANIFEST`` it can read and that every table file the manifest lists is
    there with the size it recorded, so garbage or missing or truncated files fail here; a
    full scan would check block checksums too, at a cost that grows with the store.
    """
    if not any(path.iterdir()):
        return None
    try:
        read_persisted_offset(path)
    except Exception as exc:  # rocksdict raises plain Exception; ValueError: a garbled offset
        return one_line(exc)
    return None


def offset_beyond_end(persisted: int | None, highwater: int | None) -> bool:
    """Whether a store's last applied offset lies past its changelog's last offset.

    Both in Faust's terms: ``persisted`` the offset of the last record the store applied
    (None: none yet), ``highwater`` the offset of the changelog's last record, -1 when it is
    empty (None: unknown, so no verdict). Unlike Faust's own check, an empty or one-record
    changelog counts too: Faust skips the comparison when either number is 0.
    """
    if persisted is None or highwater is None or persisted < 0:
        return False
    return persisted > highwater


def records_missing_before_start(persisted: int | None, log_start: int | None) -> bool:
    """Whether records a store still needs were deleted from its changelog.

    ``persisted`` is the offset of the last record the store applied, in Faust's terms (None:
    none yet), ``log_start`` the changelog's log start offset (None: unknown, so no verdict).
    Retention or DeleteRecords moved the log start past the next record the store needs, so
    replaying from the log start would lay the records that remain over state that still
    holds what the deleted ones overwrote or deleted. A log start exactly at the next record
    loses nothing. Compaction never moves the log start, so it never answers yes here.
    """
    if persisted is None or log_start is None or persisted < 0:
        return False
    return log_start > persisted + 1


def beyond_partition_count(partition: int, partition_count: int | None) -> bool:
    """Whether a store's partition is one its changelog (``partition_count``, None: unknown)
    does not have."""
    return partition_count is not None and partition >= partition_count


def damaged_path(path: Path, now: datetime | None = None) -> Path:
    """Where the store at ``path`` goes: ``<its dir>/damaged/<its name>.<UTC timestamp>``."""
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    target = path.parent / DAMAGED_DIR / f"{path.name}.{stamp}"
    # Two moves of one store within a microsecond would collide; never overwrite a kept one.
    n = 1
    while target.exists():
        target = path.parent / DAMAGED_DIR / f"{path.name}.{stamp}.{n}"
        n += 1
    return target


def move_aside(path: Path, now: datetime | None = None) -> Path:
    """Move the store at ``path`` into ``damaged/`` beside it; returns where it went.

    A rename within the table directory: atomic, and instant whatever the store's size.
    """
    target = damaged_path(path, now)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.rename(path, target)
    return target


def without_partitions(ownership: Ownership, partitions: set[int]) -> Ownership:
    """``ownership`` without any claim on ``partitions``, in every topic.

    The record names the tasks' topics, not which of them share a task with a changelog, so
    a partition's claims go in every topic: a claim on a task whose state is gone would keep
    the task here, to be replayed in full, while a standby elsewhere holds it; a claim
    dropped in excess only costs that hint.
    """

    def keep(claims: dict[str, list[int]]) -> dict[str, list[int]]:
        kept = {t: [p for p in ps if p not in partitions] for t, ps in claims.items()}
        return {t: ps for t, ps in kept.items() if ps}

    return Ownership(
        generation=ownership.generation,
        active=keep({t: list(ps) for t, ps in ownership.active.items()}),
        standby=keep({t: list(ps) for t, ps in ownership.standby.items()}),
        incoming=keep({t: list(ps) for t, ps in ownership.incoming.items()}),
        warmup=keep({t: list(ps) for t, ps in ownership.warmup.items()}),
    )


def forget_claims(data_dir: Path, partitions: set[int]) -> None:
    """Drop the ownership record's claims on ``partitions`` (see `without_partitions`)."""
    if not partitions or not (data_dir / OWNERSHIP_FILE).exists():
        return
    ownership = load_ownership(data_dir)
    if ownership is not None:
        save_ownership(data_dir, without_partitions(ownership, partitions))


def set_aside_unreadable(
    tabledir: Path, data_dir: Path, tables: Iterable[str], now: datetime | None = None
) -> list[Path]:
    """Called as a worker starts, before any store is opened: every store of ``tables`` that
    cannot be opened or read is moved aside, with one warning each; returns where they went."""
    moved: list[Path] = []
    partitions: set[int] = set()
    for store in stores_of(tabledir, tables):
        error = unreadable_because(store.path)
        if error is None:
            continue
        target = move_aside(store.path, now)
        logger.warning(
            "streamapp: local store of table %s partition %d is unreadable (%s): moved to %s; "
            "it is restored from the changelog",
            store.table,
            store.partition,
            error,
            target,
        )
        moved.append(target)
        partitions.add(store.partition)
    forget_claims(data_dir, partitions)
    return moved
