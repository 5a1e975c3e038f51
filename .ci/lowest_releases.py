"""Print the lowest releases pyproject.toml allows of the libraries streamapp reaches into, one
``name==version`` a line, and exit 1 if they are the releases installed (nothing else to test).

`make unit-lowest` runs the unit suite on them in a venv of its own when they differ.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

#: The libraries whose internals streamapp checks at import (streamapp.private_names,
#: streamapp.runtime.library_check): their ranges are what a user may install.
CHECKED = ("faust-streaming", "aiokafka")


def lowest(requirement: str) -> tuple[str, str] | None:
    found = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*,.*", requirement)
    return (found.group(1), found.group(2)) if found else None


def release(version: str) -> tuple[int, ...]:
    """``(0, 14)`` from ``"0.14.0"`` or ``"0.14"``: trailing zeros do not make a release."""
    numbers = [int(n) for n in re.findall(r"\d+", version.split("+")[0])]
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def main() -> int:
    project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    pins = {}
    for requirement in project["dependencies"]:
        bound = lowest(requirement)
        if bound is not None and bound[0] in CHECKED:
            pins[bound[0]] = bound[1]
    missing = [name for name in CHECKED if name not in pins]
    if missing:
        print(f"no lower bound in pyproject.toml for {', '.join(missing)}", file=sys.stderr)
        return 2
    for name, version in pins.items():
        print(f"{name}=={version}")
    same = all(release(metadata.version(name)) == release(v) for name, v in pins.items())
    return 1 if same else 0


if __name__ == "__main__":
    sys.exit(main())
