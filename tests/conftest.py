"""Hypothesis profiles: CI runs a fixed, reproducible set of examples; developers explore."""

from __future__ import annotations

import os

from hypothesis import settings

# A CI run must judge the change, not the luck of the draw: the same examples every run.
# Developers' runs stay random, which is where new counterexamples get found.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
