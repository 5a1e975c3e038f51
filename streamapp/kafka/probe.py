"""Ask a Kafka broker for its metadata over a raw socket: the readiness check of `LocalKafka`;
and pick a free port for a broker or worker to listen on (`free_port`).

A hand-rolled Metadata v1 request keeps the check synchronous and free of client-library
state; it only needs to learn whether the broker answers, and how many live brokers it names
(a cluster is ready once each node names them all).
"""

from __future__ import annotations

import random
import socket
import struct
from pathlib import Path

_METADATA_API_KEY = 3
_METADATA_VERSION = 1
_CLIENT_ID = b"streamapp-probe"


def _metadata_request(correlation_id: int) -> bytes:
    body = struct.pack(
        ">hhih", _METADATA_API_KEY, _METADATA_VERSION, correlation_id, len(_CLIENT_ID)
    )
    body += _CLIENT_ID + struct.pack(">i", -1)  # topics = null: all topics (allowed from v1)
    return struct.pack(">i", len(body)) + body


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks.extend(chunk)
    return bytes(chunks)


def live_brokers(host: str, port: int, timeout: float = 2.0) -> int:
    """How many live brokers the broker at host:port names in its metadata (0: no answer)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(_metadata_request(correlation_id=7))
            (size,) = struct.unpack(">i", _read_exact(sock, 4))
            payload = _read_exact(sock, size)
    except OSError:
        return 0
    if len(payload) < 8:
        return 0
    correlation_id, broker_count = struct.unpack(">ii", payload[:8])
    return int(broker_count) if correlation_id == 7 else 0


def broker_answers_metadata(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when the broker at host:port answers a metadata request naming a live broker."""
    return live_brokers(host, port, timeout) > 0


def port_in_use(host: str, port: int) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


#: Where Linux says which ports it hands out as the local ports of outgoing connections.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: The lowest port `free_port` picks: above the registered services most machines run.
LOWEST_PICKED_PORT = 10_000
#: Random ports `free_port` tries before it falls back to one the OS picks.
PICK_ATTEMPTS = 50


def ephemeral_range(file: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The OS's ephemeral port range (low, high), None where it cannot be read."""
    try:
        low, high = (int(field) for field in file.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def free_port(host: str = "127.0.0.1", *, ephemeral: tuple[int, int] | None = None) -> int:
    """A port nobody listens on right now, for a process about to listen on it.

    Not one the OS picks (bind to port 0): that is an ephemeral port, which any outgoing
    connection on the machine may take as its local port before the process it is for binds
    it (a JVM takes seconds to start). One CI run lost a demo's broker so, "Address already in
    use". A port below the ephemeral range (``ephemeral``, by default the OS's) is never taken
    that way, and picked at random two callers rarely meet. Where that range cannot be read,
    or has no room below it, the OS picks.
    """
    found = ephemeral if ephemeral is not None else ephemeral_range()
    if found is not None and found[0] - 1 > LOWEST_PICKED_PORT:
        pick = random.SystemRandom()  # not the module's generator: a forked caller shares it
        for _ in range(PICK_ATTEMPTS):
            port = pick.randint(LOWEST_PICKED_PORT, found[0] - 1)
            if _bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
