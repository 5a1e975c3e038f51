"""`streamapp.testing.stop_signals`: SIGTERM and SIGHUP raise as Ctrl-C does, once, and not
inside the clean-up.

Each test signals this very process (os.kill to its own pid): Python runs the handler in the
main thread before the next bytecode, so the exception is raised at that call.
"""

from __future__ import annotations

import os
import signal

import pytest

from streamapp.testing.stop_signals import Stopped, shielded, stop_signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_raises_stopped_and_runs_finally(sig: signal.Signals) -> None:
    cleaned = []
    with pytest.raises(Stopped) as raised, stop_signals():
        try:
            os.kill(os.getpid(), sig)
        finally:
            cleaned.append(True)
    assert cleaned == [True]
    assert raised.value.name == sig.name
    assert raised.value.exit_status == 128 + sig
    # A KeyboardInterrupt: whatever cleans up after Ctrl-C cleans up after SIGTERM too.
    assert isinstance(raised.value, KeyboardInterrupt)


def test_the_previous_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_later_signals_only_report_so_the_clean_up_finishes() -> None:
    repeats: list[int] = []
    finished = []
    with pytest.raises(Stopped) as raised, stop_signals(on_repeat=repeats.append):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while stopping: no second raise
            finished.append(True)
    assert raised.value.signum == signal.SIGTERM
    assert finished == [True]
    assert repeats == [signal.SIGINT]


def test_a_signal_inside_shielded_is_held_until_the_block_ends() -> None:
    steps = []
    with pytest.raises(Stopped) as raised, stop_signals():
        with shielded():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("after the signal, still inside")
        steps.append("after the block")
    assert steps == ["after the signal, still inside"]
    assert raised.value.signum == signal.SIGTERM


def test_an_error_leaving_shielded_is_not_replaced_by_the_held_signal() -> None:
    with pytest.raises(ValueError, match="the clean-up failed"), stop_signals():
        with shielded():
            os.kill(os.getpid(), signal.SIGTERM)
            raise ValueError("the clean-up failed")


def test_one_block_at_a_time() -> None:
    with stop_signals(), pytest.raises(RuntimeError, match="already active"):
        with stop_signals():
            pass
