"""Natural order for names people read: ``member-2`` before ``member-10``."""

from __future__ import annotations

import re

__all__ = ["natural_key"]

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key splitting ``name`` into text and numbers, numbers compared as numbers.

    Each piece is tagged (0 for text, 1 for a number) so that a number and a text never meet
    in one comparison, whatever the names.
    """
    return tuple(
        (1, int(piece)) if piece.isdigit() else (0, piece) for piece in _DIGITS.split(name) if piece
    )
