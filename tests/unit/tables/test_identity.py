from __future__ import annotations

from pathlib import Path

import pytest

from tables.identity import CLIENT_ID_FILE, ClientIdError, load_or_create_client_id


def test_created_once_then_kept(tmp_path: Path) -> None:
    first = load_or_create_client_id(tmp_path / "data")
    assert first.startswith("worker-")
    assert load_or_create_client_id(tmp_path / "data") == first
    assert (tmp_path / "data" / CLIENT_ID_FILE).read_text().strip() == first


def test_requested_id_is_kept_and_a_different_one_refused(tmp_path: Path) -> None:
    assert load_or_create_client_id(tmp_path, "worker-1") == "worker-1"
    assert load_or_create_client_id(tmp_path, "worker-1") == "worker-1"
    assert load_or_create_client_id(tmp_path) == "worker-1"
    with pytest.raises(ClientIdError, match="belongs to client id 'worker-1', not 'worker-2'"):
        load_or_create_client_id(tmp_path, "worker-2")


@pytest.mark.parametrize("bad", ["has space", "x" * 129, "a/b"])
def test_invalid_requested_ids_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ClientIdError, match="client id"):
        load_or_create_client_id(tmp_path, bad)
    assert not (tmp_path / CLIENT_ID_FILE).exists()


@pytest.mark.parametrize("kept", ["", "has space\n"])
def test_a_corrupt_kept_id_is_refused(tmp_path: Path, kept: str) -> None:
    (tmp_path / CLIENT_ID_FILE).write_text(kept)
    with pytest.raises(ClientIdError, match="client id"):
        load_or_create_client_id(tmp_path)
