"""`streamapp.testing.stop_signals`: SIGTERM and SIGHUP stop as Ctrl-C does, once, and not
inside the clean-up.

Each test signals this very process (os.kill to its own pid): Python runs the handler in the
main thread before the next bytecode, so the exception is raised at that call.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import pytest

from streamapp.testing.stop_signals import (
    Stopped,
    run_until_stopped,
    shielded,
    stop_signals,
    stopped_by,
)


@pytest.fixture(autouse=True)
def python_sigint_handler() -> Iterator[None]:
    """Python's own SIGINT handler, as in a process started from a terminal: one started in the
    background by a non-interactive shell (``cmd &``) inherits SIGINT ignored, and Python then
    leaves it ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_raises_keyboard_interrupt_and_runs_finally(sig: signal.Signals) -> None:
    cleaned, seen = [], []
    with stop_signals():
        try:
            try:
                os.kill(os.getpid(), sig)
            finally:
                cleaned.append(True)
        except KeyboardInterrupt as exc:
            # Asked inside the block, as the demo's finally asks it.
            seen.append(stopped_by(exc))
    assert cleaned == [True]
    assert seen == [sig]


def test_inside_asyncio_run_a_sigterm_stops_the_main_task_only_as_ctrl_c_does() -> None:
    """asyncio's own Ctrl-C stop: the main task is cancelled and its clean-up awaited while the
    other tasks (a producer's sender, say) still run to serve it; the exception comes after."""
    seen = []

    async def main() -> None:
        helper = asyncio.create_task(asyncio.sleep(3600))
        try:
            # Signalled from a callback of the loop, as a signal arriving while it waits.
            asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0)  # an await in the clean-up, as a producer's stop has
            seen.append(("helper cancelled", helper.cancelling()))

    with stop_signals(), pytest.raises(KeyboardInterrupt):
        asyncio.run(main())
    assert seen == [("helper cancelled", 0)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_with_sigint_ignored_a_sigterm_or_sighup_still_stops(sig: signal.Signals) -> None:
    """Started in the background (``streamapp demo &``), SIGINT is ignored: a SIGTERM must
    still stop the driver rather than be ignored with it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    seen = []
    with stop_signals():
        try:
            os.kill(os.getpid(), sig)
        except KeyboardInterrupt as exc:
            seen.append(stopped_by(exc))
    assert seen == [sig]


def test_the_previous_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_repeated_sigterm_only_reports_so_the_clean_up_finishes() -> None:
    repeats: list[int] = []
    finished = []
    with stop_signals(on_repeat=repeats.append), pytest.raises(KeyboardInterrupt):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # a supervisor repeating itself
            finished.append(True)
    assert finished == [True]
    assert repeats == [signal.SIGTERM]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_inside_shielded_is_held_until_the_block_ends(sig: signal.Signals) -> None:
    steps = []
    with stop_signals():
        try:
            with shielded():
                os.kill(os.getpid(), sig)
                steps.append("after the signal, still inside")
            steps.append("after the block")
        except Stopped as exc:
            assert stopped_by(exc) == sig
    assert steps == ["after the signal, still inside"]


def test_an_error_leaving_shielded_is_not_replaced_by_the_held_signal() -> None:
    with pytest.raises(ValueError, match="the clean-up failed"), stop_signals(), shielded():
        os.kill(os.getpid(), signal.SIGTERM)
        raise ValueError("the clean-up failed")


def test_one_block_at_a_time() -> None:
    with stop_signals(), pytest.raises(RuntimeError, match="already active"), stop_signals():
        pass


def test_run_until_stopped_turns_a_stop_into_the_shells_exit_status() -> None:
    def stopped_main() -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        return 0  # not reached: the signal raises at the call above

    assert run_until_stopped(stopped_main) == 143
    assert run_until_stopped(lambda: 3) == 3
