"""The one error type a caller of `assignor` has to know about."""

from __future__ import annotations

__all__ = ["ScenarioError"]


class ScenarioError(ValueError):
    """Bad input to `assignor.plan`: the message names the offending field path.

    Example: ``topics.clicks: partition count must be at least 1, got 0``.
    Raised before any decision is made, so a caller never sees a partial result.
    """
