"""The client id of a worker process, created once and kept in its data directory.

Stickiness and local state follow the client id, not Kafka's member id (which changes on every
restart), so a restarted worker must come back with the id it had.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from tables.atomic_file import write_atomically

CLIENT_ID_FILE = "streamapp-client-id"
_VALID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class ClientIdError(ValueError):
    """A client id given by the user or kept in the data dir is not usable."""


def validate_client_id(client_id: str) -> str:
    if not _VALID.match(client_id):
        raise ClientIdError(
            f"client id {client_id!r} must be 1-128 characters: "
            "letters, digits, '.', '_', ':' or '-'"
        )
    return client_id


def load_or_create_client_id(data_dir: str | Path, requested: str | None = None) -> str:
    """The client id kept in ``data_dir``; created (``requested`` or a fresh one) on first use.

    A requested id that differs from the one kept is an error: the state on disk belongs to the
    kept identity, and silently adopting a new one would make other workers' tasks look local.
    """
    path = Path(data_dir) / CLIENT_ID_FILE
    if path.exists():
        kept = validate_client_id(path.read_text().strip())
        if requested is not None and requested != kept:
            raise ClientIdError(
                f"data dir {data_dir} belongs to client id {kept!r}, not {requested!r}: "
                "use that id, or another data dir for a new worker"
            )
        return kept
    client_id = validate_client_id(requested or f"worker-{uuid.uuid4().hex[:12]}")
    # A crash must never leave an empty or half-written id behind.
    write_atomically(path, client_id + "\n")
    return client_id
