"""Files a crash must never leave half-written: written whole beside, then renamed over."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: a crash leaves the old content or the new, never part.

    ``os.replace`` is atomic on POSIX within one file system, and the scratch file sits in the
    same directory. The directory is created if needed.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(path.suffix + ".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)
