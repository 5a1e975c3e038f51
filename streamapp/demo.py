"""`streamapp demo`: the ad-click join demo of examples/adclick, end to end.

The demo lives in the source checkout's ``examples/`` (it is an example, not part of
the installed package), so it is imported from the repository this module sits in.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    if not (REPO_ROOT / "examples" / "adclick" / "demo.py").is_file():
        print(
            f"streamapp demo: examples/adclick not found under {REPO_ROOT}; "
            "run it from a source checkout (pip install -e '.[spark]')",
            file=sys.stderr,
        )
        return 2
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    demo = importlib.import_module("examples.adclick.demo")
    return int(demo.main(argv))
