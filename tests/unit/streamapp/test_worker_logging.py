"""streamapp's worker builds no DEBUG log record at ``-l warning``; Faust's did.

The worker's logging is set up as Faust's worker sets it up (mode's ``setup_logging``, then the
worker's ``on_setup_root_logger``), and a `logging.LogRecord` factory counts what a debug call
builds. No timing is measured.
"""

from __future__ import annotations

import gc
import io
import logging
from collections.abc import Callable, Iterator
from typing import Any

import faust
import pytest
from mode.utils.logging import setup_logging

from streamapp import App
from streamapp.faust_worker import Worker


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def records_built() -> Iterator[list[logging.LogRecord]]:
    """Every LogRecord built while the test runs; the root logger's setup restored after."""
    root = logging.root
    saved_level, saved_handlers = root.level, list(root.handlers)
    factory = logging.getLogRecordFactory()
    built: list[logging.LogRecord] = []

    def counting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        built.append(record)
        return record

    logging.setLogRecordFactory(counting)
    try:
        yield built
    finally:
        logging.setLogRecordFactory(factory)
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


def _set_up(worker_class: Callable[..., faust.Worker], level: str, out: io.StringIO) -> Any:
    """A worker of a fresh app with its root logger configured at ``level``, as at its start."""
    app = App(f"logging-test-{worker_class.__name__}-{level}")
    worker = worker_class(app, loglevel=level, stdout=out, stderr=out)
    number = setup_logging(loglevel=level, logfile=out)
    worker.on_setup_root_logger(logging.root, number)
    return worker


def _debug_then_warning(built: list[logging.LogRecord]) -> tuple[int, list[str]]:
    """How many records one debug call built, and the messages one warning call built."""
    log = logging.getLogger("faust.transport.consumer")
    del built[:]
    log.debug("fetched %r", object())
    debug_built = len(built)
    log.warning("a warning users see")
    return debug_built, [r.getMessage() for r in built[debug_built:]]


def test_streamapp_app_runs_streamapps_worker() -> None:
    assert App("logging-test-worker-class").conf.Worker is Worker


def test_stock_faust_worker_builds_debug_records_at_warning(
    records_built: list[logging.LogRecord],
) -> None:
    # The cost this worker removes: Faust's spinner puts the root logger at DEBUG.
    _set_up(faust.Worker, "warning", io.StringIO())
    assert logging.root.level == logging.DEBUG
    debug_built, _ = _debug_then_warning(records_built)
    assert debug_built == 1


def test_no_debug_record_is_built_at_warning(
    records_built: list[logging.LogRecord], capsys: pytest.CaptureFixture[str]
) -> None:
    _set_up(Worker, "warning", io.StringIO())
    log = logging.getLogger("faust.transport.consumer")
    assert not log.isEnabledFor(logging.DEBUG)
    assert not log.isEnabledFor(logging.INFO)
    debug_built, warnings = _debug_then_warning(records_built)
    assert debug_built == 0
    # The warning is built and shown, as before.
    assert warnings == ["a warning users see"]
    assert "a warning users see" in capsys.readouterr().err  # mode's handler writes to stderr


def test_info_level_is_left_as_faust_sets_it(
    records_built: list[logging.LogRecord], capsys: pytest.CaptureFixture[str]
) -> None:
    # Below WARN Faust has no spinner and leaves the root at the chosen level: INFO is shown.
    _set_up(Worker, "info", io.StringIO())
    assert logging.root.level == logging.INFO
    debug_built, _ = _debug_then_warning(records_built)
    assert debug_built == 0
    logging.getLogger("faust.worker").info("an info line users see")
    assert "an info line users see" in capsys.readouterr().err


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The heap the started worker froze (`streamapp.startup_heap`) given back after the test."""
    try:
        yield
    finally:
        gc.unfreeze()


async def test_on_a_terminal_debug_records_stop_once_started(
    records_built: list[logging.LogRecord], unfrozen: None
) -> None:
    # The spinner draws on a terminal while the worker starts: Faust's DEBUG root stays
    # until then, so it spins as before, and goes once the worker has started.
    worker = _set_up(Worker, "warning", _Terminal())
    assert logging.root.level == logging.DEBUG
    assert gc.get_freeze_count() == 0
    await worker.on_startup_finished()
    assert logging.root.level == logging.WARNING
    assert gc.get_freeze_count() > 0  # the startup heap is left out of later collections
    debug_built, warnings = _debug_then_warning(records_built)
    assert debug_built == 0
    assert warnings == ["a warning users see"]
    # While it stops, the spinner spins again on every record, as in Faust.
    worker.on_worker_shutdown()
    assert logging.root.level == logging.DEBUG
