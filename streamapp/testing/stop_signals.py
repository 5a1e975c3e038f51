"""SIGTERM and SIGHUP stop a driver the way Ctrl-C does, so that its clean-up runs.

A driver (the demo, a benchmark) starts a Kafka broker and worker processes and stops them in a
``finally``. Python's default for SIGTERM and SIGHUP ends the process on the spot: no ``finally``
runs, and the broker and the workers live on as orphans. Inside `stop_signals`, the first SIGINT,
SIGTERM or SIGHUP raises `Stopped`, a ``KeyboardInterrupt``, so code that already cleans up after
Ctrl-C cleans up after the others too.

A stop must not be cut short by the next signal (Ctrl-C pressed twice, a supervisor repeating its
SIGTERM): once `Stopped` is raised, later signals only call ``on_repeat``; and inside `shielded`
(the clean-up itself) a first signal is held and raised when the block ends, unless an exception
is already on its way out.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType, TracebackType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal arrived; ``exit_status`` is the shell's 128 + its number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


@dataclass
class _State:
    """Signal handlers are per process, and so is this."""

    installed: bool = False
    raised: bool = False  # a Stopped is on its way: later signals are repeats
    shielding: int = 0  # depth of `shielded` blocks
    held: int | None = None  # a signal that arrived inside `shielded`
    on_repeat: Callable[[int], None] | None = None

    def reset(self) -> None:
        """A fresh start for the next `stop_signals` block."""
        self.installed, self.raised, self.shielding = False, False, 0
        self.held, self.on_repeat = None, None


_state = _State()


def _handle(signum: int, frame: FrameType | None) -> None:
    if _state.raised or _state.held is not None:
        if _state.on_repeat is not None:
            _state.on_repeat(signum)
        return
    if _state.shielding:
        _state.held = signum
        return
    _state.raised = True
    raise Stopped(signum)


@contextmanager
def stop_signals(on_repeat: Callable[[int], None] | None = None) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise `Stopped` in the main thread while the block runs.

    ``on_repeat(signum)``: called for each signal after the first (e.g. to say that the stop is
    under way). The previous handlers come back when the block ends.
    """
    if _state.installed:
        raise RuntimeError("stop_signals() is already active in this process")
    previous = {s: signal.signal(s, _handle) for s in STOP_SIGNALS}
    _state.installed, _state.on_repeat = True, on_repeat
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _state.reset()


def shielded() -> _Shielded:
    """A block that a stop signal does not interrupt: the clean-up that stops the children.

    A signal arriving inside is raised as `Stopped` when the block ends, unless the block is
    already ending with an exception (which then carries on, the signal having been noted).
    """
    return _Shielded()


class _Shielded:
    def __enter__(self) -> None:
        _state.shielding += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _state.shielding -= 1
        if _state.shielding or _state.held is None:
            return
        held, _state.held = _state.held, None
        _state.raised = True
        if exc_type is None:
            raise Stopped(held)
