"""Old spellings of the joins' and aggregates' declarations, kept working for one release.

Each warns once per call site with a `DeprecationWarning` naming the spelling to use instead.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["renamed", "warn"]


def warn(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new`` (removed in the next release)."""
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release: use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def renamed(owner: str, given: dict[str, Any], names: dict[str, str]) -> None:
    """Warn for each old keyword in ``given`` (those not None), ``names`` mapping each old
    keyword to what replaces it; ``owner`` names the class (``"WindowedJoin"``)."""
    for old, new in names.items():
        if given.get(old) is not None:
            warn(f"{owner}({old}=...)", new, stacklevel=4)
