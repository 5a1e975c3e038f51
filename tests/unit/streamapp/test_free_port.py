"""streamapp.kafka.probe.free_port: a port to listen on that no outgoing connection takes first."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from streamapp.kafka import probe
from streamapp.kafka.probe import LOWEST_PICKED_PORT, ephemeral_range, free_port


def test_the_port_picked_lies_below_the_ephemeral_range_and_can_be_bound() -> None:
    # Bind-to-0 returned an ephemeral port, which an outgoing connection took before the demo's
    # broker bound it ("Address already in use", in one CI run).
    for _ in range(20):
        port = free_port("127.0.0.1", ephemeral=(32768, 60999))
        assert LOWEST_PICKED_PORT <= port < 32768
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        wanted = iter([busy, busy, 20_123])

        class Picks:
            def randint(self, low: int, high: int) -> int:
                return next(wanted)

        monkeypatch.setattr(probe.random, "SystemRandom", Picks)
        assert free_port("127.0.0.1", ephemeral=(32768, 60999)) == 20_123


def test_with_no_room_below_the_range_the_os_picks() -> None:
    # A range that starts at 1024 (some systems) leaves nothing safe below it.
    port = free_port("127.0.0.1", ephemeral=(1024, 65535))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_the_range_is_read_from_the_os_file(tmp_path: Path) -> None:
    file = tmp_path / "ip_local_port_range"
    file.write_text("32768\t60999\n")
    assert ephemeral_range(file) == (32768, 60999)
    assert ephemeral_range(tmp_path / "missing") is None
    file.write_text("garbled")
    assert ephemeral_range(file) is None
