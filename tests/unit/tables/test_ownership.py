"""The last ownership kept in the data dir: round trip, absence, and a damaged file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tables.ownership import OWNERSHIP_FILE, Ownership, load_ownership, save_ownership


def test_round_trip_and_overwrite(tmp_path: Path) -> None:
    assert load_ownership(tmp_path) is None
    first = Ownership(generation=3, active={"t": [2, 0]}, standby={"c": [1]})
    save_ownership(tmp_path, first)
    assert load_ownership(tmp_path) == Ownership(3, {"t": [0, 2]}, {"c": [1]})
    save_ownership(tmp_path, Ownership(generation=4))
    assert load_ownership(tmp_path) == Ownership(4)
    assert [p.name for p in tmp_path.iterdir()] == [OWNERSHIP_FILE]


def test_incoming_partitions_survive_a_restart_and_old_files_have_none(tmp_path: Path) -> None:
    save_ownership(tmp_path, Ownership(generation=12, incoming={"t": [3, 2]}))
    assert load_ownership(tmp_path) == Ownership(12, incoming={"t": [2, 3]})
    (tmp_path / OWNERSHIP_FILE).write_text('{"generation": 8, "active": {"t": [1]}, "standby": {}}')
    assert load_ownership(tmp_path) == Ownership(8, {"t": [1]})


@pytest.mark.parametrize(
    "text",
    ["", "{", "[]", '{"generation": 1}', '{"generation": 1, "active": {"t": [-1]}, "standby": {}}'],
)
def test_damaged_file_is_ignored_with_a_warning(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / OWNERSHIP_FILE).write_text(text)
    assert load_ownership(tmp_path) is None
    assert OWNERSHIP_FILE in caplog.text


def test_warmups_survive_a_restart_and_old_files_have_none(tmp_path: Path) -> None:
    save_ownership(tmp_path, Ownership(generation=7, standby={"c": [1]}, warmup={"c": [4, 0]}))
    assert load_ownership(tmp_path) == Ownership(7, standby={"c": [1]}, warmup={"c": [0, 4]})
    (tmp_path / OWNERSHIP_FILE).write_text('{"generation": 7, "active": {}, "standby": {}}')
    assert load_ownership(tmp_path) == Ownership(7)
