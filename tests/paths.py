"""Where the tests find the repository's files, wherever it is cloned."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
DATA = REPO_ROOT / "tests" / "data"
SCENARIOS = DATA / "scenarios"
#: The reference scenarios every strategy and the plan CLI are held to.
SHARED_SCENARIOS = SCENARIOS / "shared"
#: What a test run keeps for people to look at afterwards (the group page's screenshot, the
#: `streamapp group` table of a live group): overwritten by each run, ignored by git.
ARTIFACTS = REPO_ROOT / "build" / "test-artifacts"


def artifact(name: str) -> Path:
    """``ARTIFACTS / name``, its directory made."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name
