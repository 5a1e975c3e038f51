"""The worker class `streamapp.App` runs under: Faust's, with log levels that make disabled
levels cheap.

Faust's worker draws a progress spinner that advances on every log record. To see them all,
at ``-l warning`` and above it adds a spinner handler at DEBUG and sets the root logger to
DEBUG, leaving the console handler at the chosen level. So every ``logger.debug`` call in
Faust, mode and aiokafka builds a `logging.LogRecord` (about three per input record), formats
nothing, shows nothing, and only turns the spinner, which draws only on a terminal and only
until the worker has started (and again while it stops).

This worker gives the root logger back its configured level wherever the spinner cannot draw:
at once when the output is not a terminal, and once the worker has started when it is (the
spinner returns for the shutdown, as in Faust). Then ``logger.isEnabledFor(DEBUG)`` is false
at ``-l warning`` and a debug call returns before building anything. Every line a handler
showed before is still shown: the console handler filters at the chosen level either way, and
the level given back is the one the logging configuration set (an app's own
``logging_config`` keeps its root level).

It also installs `streamapp.quiet_logs`: Faust's, mode's and aiokafka's routine steps are
logged at DEBUG, so the log at INFO says what a person needs. And once the worker has started,
it leaves the objects made so far out of later garbage collections (`streamapp.startup_heap`).

Only Faust's public worker hooks are overridden (``on_setup_root_logger``,
``on_startup_finished``, ``on_worker_shutdown``); no private name is touched.
"""

from __future__ import annotations

import logging
import os

import faust

from streamapp import quiet_logs, startup_heap

logger = logging.getLogger(__name__)


class Worker(faust.Worker):
    #: The root logger's level as the logging configuration left it, before the spinner's DEBUG.
    configured_root_level: int | None = None

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        quiet_logs.install()
        configured = logger.level
        super().on_setup_root_logger(logger, level)
        if self.spinner is None or logger.level == configured:
            return  # Faust left the root logger's level alone (no spinner below WARN)
        self.configured_root_level = configured
        if not self._spinner_draws():
            logger.setLevel(configured)

    async def on_first_start(self) -> None:
        await super().on_first_start()
        # In place of Faust's banner table (``streamapp worker`` runs Faust with --quiet).
        conf = self.app.conf
        web = f"http://{conf.web_host}:{conf.web_port}" if conf.web_enabled else "off"
        logger.info(
            "streamapp: worker of app %s (faust %s, pid %d), broker %s, web %s, data %s",
            conf.id,
            faust.__version__,
            os.getpid(),
            ",".join(str(url) for url in conf.broker),
            web,
            conf.appdir,
        )

    async def on_startup_finished(self) -> None:
        await super().on_startup_finished()
        # What the worker made while starting lives as long as it does: kept out of the
        # collector's full collections from now on (streamapp.startup_heap).
        startup_heap.freeze()
        # Faust finished the spinner: it draws nothing more until the worker stops.
        if self.configured_root_level is not None:
            logging.root.setLevel(self.configured_root_level)

    def on_worker_shutdown(self) -> None:
        super().on_worker_shutdown()
        if self.configured_root_level is not None and self._spinner_draws():
            # Faust restarts the spinner on a terminal while the worker stops; it spins on
            # every record, as it did at startup.
            logging.root.setLevel(logging.DEBUG)

    def _spinner_draws(self) -> bool:
        spinner = self.spinner
        if spinner is None:
            return False
        try:
            return bool(spinner.file.isatty())
        except (AttributeError, ValueError):  # a closed or file-like stream
            return False
