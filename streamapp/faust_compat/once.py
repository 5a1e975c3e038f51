"""``@once``: a patch's ``install`` that runs its body the first time it is called only.

Every module here that patches a Faust or aiokafka class has an ``install()``; the app calls
them as it is built, and a process may build several apps (the tests do). Patching twice would
wrap a wrapper, or save the patched function as the "original" one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable


def once(install: Callable[[], None]) -> Callable[[], None]:
    """``install``, made idempotent for this process."""
    done = False

    @functools.wraps(install)
    def install_once() -> None:
        nonlocal done
        if not done:
            done = True
            install()

    return install_once
