"""`tables.atomic_file.write_atomically`: the data is on disk before the name, the name after."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tables.atomic_file import write_atomically


def test_replaces_the_content_and_leaves_no_scratch_file(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "record.json"
    write_atomically(target, "first")
    write_atomically(target, "second, longer than the first")
    assert target.read_text() == "second, longer than the first"
    assert sorted(p.name for p in target.parent.iterdir()) == ["record.json"]


def test_syncs_the_data_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A power loss after the rename must not leave an empty file: without the first fsync,
    the file system may write the rename before the data."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        kind = "dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file"
        events.append(f"fsync {kind}")
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_atomically(tmp_path / "marker", "clean\n")
    assert events == ["fsync file", "replace", "fsync dir"]
    assert (tmp_path / "marker").read_text() == "clean\n"
