"""SIGTERM and SIGHUP stop a driver the way Ctrl-C does, so that its clean-up runs.

A driver (the demo, a benchmark) starts a Kafka broker and worker processes and stops them in a
``finally``. Python's default for SIGTERM and SIGHUP ends the process on the spot: no ``finally``
runs, and the broker and the workers live on as orphans. Inside `stop_signals`, the first SIGTERM
or SIGHUP is handed to the SIGINT handler of the moment, so it does exactly what Ctrl-C does:
``KeyboardInterrupt`` in plain code, and inside ``asyncio.run`` asyncio's own orderly stop (the
main task cancelled, its ``finally`` blocks awaited, then ``KeyboardInterrupt``). SIGINT keeps
its handler: ``asyncio.run`` only installs that orderly stop over Python's default one.

A stop must not be cut short by the next signal (Ctrl-C pressed twice, a supervisor repeating its
SIGTERM): a repeated SIGTERM or SIGHUP only calls ``on_repeat``, and inside `shielded` (the
clean-up itself) a first signal of the three is held and raised as `Stopped` when the block ends,
unless an exception is already on its way out. `run_until_stopped` wraps a driver's ``main`` in
all this and `stopped_by` names the signal that stopped it.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Passed on to the SIGINT handler; SIGINT itself is left to Python and asyncio.
_PASSED_ON = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal held during `shielded`, raised when the block ended."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class _State:
    """Signal handlers are per process, and so is this."""

    installed: bool = False
    signum: int | None = None  # the SIGTERM or SIGHUP passed on: later ones are repeats
    shielding: int = 0  # depth of `shielded` blocks
    held: int | None = None  # a signal that arrived inside `shielded`
    on_repeat: Callable[[int], None] | None = None

    def reset(self) -> None:
        """A fresh start for the next `stop_signals` block."""
        self.installed, self.signum, self.shielding = False, None, 0
        self.held, self.on_repeat = None, None


_state = _State()


def _pass_on(signum: int, frame: FrameType | None) -> None:
    if _state.signum is not None:
        if _state.on_repeat is not None:
            _state.on_repeat(signum)
        return
    _state.signum = signum
    handler: Any = signal.getsignal(signal.SIGINT)
    if callable(handler):  # Python's default_int_handler, or asyncio.run's while one runs
        handler(signal.SIGINT, frame)
    else:  # SIGINT ignored or defaulted by whoever started us: stop as Ctrl-C would have
        raise KeyboardInterrupt


def _hold(signum: int, frame: FrameType | None) -> None:
    if _state.held is None:
        _state.held = signum
    if _state.on_repeat is not None:
        _state.on_repeat(signum)


@contextmanager
def stop_signals(on_repeat: Callable[[int], None] | None = None) -> Iterator[None]:
    """SIGTERM and SIGHUP stop the block as SIGINT does; ``on_repeat(signum)`` for each one
    after the first (e.g. to say that the stop is under way). The previous handlers come back
    when the block ends."""
    if _state.installed:
        raise RuntimeError("stop_signals() is already active in this process")
    previous = {s: signal.signal(s, _pass_on) for s in _PASSED_ON}
    _state.installed, _state.on_repeat = True, on_repeat
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _state.reset()


def stopped_by(exc: BaseException | None) -> signal.Signals | None:
    """The signal behind ``exc`` when it is a stop (inside `stop_signals`), else None."""
    if isinstance(exc, Stopped):
        return signal.Signals(exc.signum)
    if isinstance(exc, KeyboardInterrupt):
        return signal.Signals(_state.signum or signal.SIGINT)
    return None


def shielded() -> _Shielded:
    """A block that no stop signal interrupts: the clean-up that stops the children.

    A signal arriving inside is raised as `Stopped` when the block ends, unless the block is
    already ending with an exception (which then carries on, the signal having been noted).
    """
    return _Shielded()


class _Shielded:
    def __enter__(self) -> None:
        _state.shielding += 1
        if _state.shielding == 1:
            self.previous = {s: signal.signal(s, _hold) for s in STOP_SIGNALS}

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _state.shielding -= 1
        if _state.shielding:
            return
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        held, _state.held = _state.held, None
        if held is None:
            return
        if _state.signum is None:
            _state.signum = held  # what stopped the run, for `stopped_by`; later ones repeat
        if exc_type is None:
            raise Stopped(held)


def run_until_stopped(
    main: Callable[[], int], on_repeat: Callable[[int], None] | None = None
) -> int:
    """``main()`` under `stop_signals`; a stop ends it with 128 + the signal's number, as a shell
    reports it, without a traceback (``main``'s own ``finally`` blocks have stopped its children).
    """
    with stop_signals(on_repeat):
        try:
            return main()
        except KeyboardInterrupt as exc:
            stop = stopped_by(exc)
            assert stop is not None  # every KeyboardInterrupt is a stop
            return 128 + stop
