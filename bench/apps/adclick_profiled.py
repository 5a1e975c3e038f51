"""The ad-click demo app with a cProfile of its worker process (``bench.adclick --profile``).

``ADCLICK_BENCH_PROFILE``: where the profile goes. The profiler runs from import (before the
worker starts) to the process's exit after a clean stop, on the thread that imports the app: the
worker's event-loop thread. Startup and shutdown are in it too; the throughput phase, the bulk
of a run, dominates.
"""

from __future__ import annotations

import atexit
import cProfile
import os

from examples.adclick.app import app

__all__ = ["app"]

_PROFILE = os.environ.get("ADCLICK_BENCH_PROFILE")
if _PROFILE:
    _profiler = cProfile.Profile()

    def _dump() -> None:
        _profiler.disable()
        _profiler.dump_stats(_PROFILE)

    atexit.register(_dump)
    _profiler.enable()
