"""Ask a Kafka broker for its metadata over a raw socket: the readiness check of `LocalKafka`.

A hand-rolled Metadata v1 request keeps the check synchronous and free of client-library
state; it only needs to learn whether the broker answers with at least one live broker.
"""

from __future__ import annotations

import socket
import struct

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


def broker_answers_metadata(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when the broker at host:port answers a metadata request naming a live broker."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(_metadata_request(correlation_id=7))
            (size,) = struct.unpack(">i", _read_exact(sock, 4))
            payload = _read_exact(sock, size)
    except OSError:
        return False
    if len(payload) < 8:
        return False
    correlation_id, broker_count = struct.unpack(">ii", payload[:8])
    return bool(correlation_id == 7 and broker_count > 0)


def port_in_use(host: str, port: int) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free right now (the usual bind-to-0 trick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
