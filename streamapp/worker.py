"""`streamapp worker`: run one worker process of a `streamapp.App` (Faust's worker underneath).

Faust reads its broker, data dir and web port from environment variables when the app's
settings are first used, and explicit values in the user's code do not override them; so the
options are turned into those variables before the app module is imported. streamapp's own
settings (client id, host, rack, capacity, bad-record policy) go onto ``app.streamapp_settings``.

Before Faust starts, every option that can be checked is checked (`streamapp.preflight`): a bad
one is refused with one line naming it and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import faust
from faust.exceptions import AlreadyConfiguredWarning

from streamapp.broker_address import use_broker_option
from streamapp.preflight import (
    WorkerSetupError,
    check_dead_letter_topic,
    check_group_protocol,
    check_option_ranges,
    check_topics,
    check_worker_environment,
    describe_option,
    lock_worker_data_dir,
    prepare_data_dir,
)
from streamapp.settings import (
    SettingsError,
    StreamappSettings,
    add_setting_options,
    options_from_args,
    resolve,
    use_worker_options,
)
from tables.identity import ClientIdError, load_or_create_client_id

#: The exit status of a worker whose group.instance.id another worker took (see
#: `streamapp.runtime.group.static_membership`): not 2, as it was no bad option.
FENCED_EXIT_STATUS = 3


WORKER_DESCRIPTION = (
    "Run one worker process of a streamapp.App (Faust's worker underneath): it joins the "
    "app's consumer group, runs the agents and tables of the partitions the group gives it, "
    "and keeps standby replicas of others' table partitions. Options are checked before Faust "
    "starts; a bad one is refused with one line and exit status 2. The streamapp settings "
    "below can also be STREAMAPP_* variables or App(...) keywords: an option beats a "
    "variable, which beats a keyword (docs/settings.md). Stop it with Ctrl-C or SIGTERM."
)


def add_app_arguments(parser: argparse.ArgumentParser, *, app_help: str) -> None:
    """``-A/--app MODULE:APP`` and ``--broker``, as every command that loads an app spells them."""
    parser.add_argument("-A", "--app", required=True, metavar="MODULE:APP", help=app_help)
    parser.add_argument("--broker", help="Kafka bootstrap address (default: the app's broker)")


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    add_app_arguments(parser, app_help="the streamapp.App to run, e.g. examples.adclick.app:app")
    parser.add_argument(
        "--web-port",
        type=int,
        help="port of the worker's web views: /streamapp/assignment (what it holds, what "
        "recovery cost), /metrics (Prometheus) and the app's own pages (default: the app's "
        "web_port, Faust's 6066 unless the app sets one; a second worker on one machine must be "
        "given another, or it is refused because the port is taken)",
    )
    parser.add_argument(
        "--web-host",
        default="127.0.0.1",
        help="address the web views bind to (default: %(default)s)",
    )
    parser.add_argument(
        "--data-dir",
        help="where tables' local state and the client id live "
        "(default: the app's datadir, '<app id>-data')",
    )
    # Every streamapp setting, from the one list of them (streamapp.settings.SETTINGS).
    add_setting_options(parser)
    parser.add_argument(
        "-l",
        "--loglevel",
        default="info",
        choices=["debug", "info", "warning", "error", "critical"],
        help="least severe log messages shown (Python's logging levels; default: info)",
    )


def import_app(spec: str) -> faust.App:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise WorkerSetupError(f"-A {spec!r}: expected MODULE:APP, e.g. examples.adclick.app:app")
    # Like `python -m`, let apps in the current directory be found.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise WorkerSetupError(f"-A {spec!r}: cannot import {module_name!r}: {exc}") from exc
    except SettingsError as exc:
        # streamapp.App reads STREAMAPP_* variables as the module creates it.
        raise WorkerSetupError(f"-A {spec!r}: {exc}") from None
    app = getattr(module, attribute, None)
    if not isinstance(app, faust.App):
        raise WorkerSetupError(f"-A {spec!r}: {attribute!r} in {module_name} is not a faust.App")
    return app


def prepare_worker(args: argparse.Namespace) -> faust.App:
    """Import and configure the app as the options say, ready for Faust's worker.

    Refuses, with a `WorkerSetupError` naming the option, a data dir that cannot be used or
    is in use by another worker; takes the data dir's lock before anything in it is read.
    """
    check_option_ranges(args)
    use_broker_option(args.broker)
    if args.data_dir:
        os.environ["APP_DATADIR"] = str(Path(args.data_dir).absolute())
    if args.web_port is not None:
        os.environ["WEB_PORT"] = str(args.web_port)
    os.environ["WEB_BIND"] = args.web_host
    os.environ["WEB_HOST"] = args.web_host
    # The app resolves its settings as its module creates it: the options must be known first.
    use_worker_options(options_from_args(args))
    app = import_app(args.app)
    data_dir = Path(app.conf.datadir).absolute()
    prepare_data_dir(data_dir, describe_option("--data-dir", data_dir, bool(args.data_dir)))
    # Before the client id file, the ownership record or any store is opened: from here
    # on, this process is the only one working in the data dir.
    lock_worker_data_dir(data_dir)
    try:
        # A plain faust.App has none of its own: its settings come from options and env alone.
        settings = getattr(app, "streamapp_settings", None) or resolve()
        client_id = load_or_create_client_id(data_dir, settings.client_id)
    except (SettingsError, ClientIdError) as exc:
        raise WorkerSetupError(str(exc)) from exc
    app.streamapp_settings = replace(settings, client_id=client_id)  # type: ignore[attr-defined]
    os.environ["STREAMAPP_CLIENT_ID"] = client_id
    use_static_membership(app, app.streamapp_settings)  # type: ignore[attr-defined]
    return app


def use_static_membership(app: faust.App, settings: StreamappSettings) -> None:
    """Make the client id the consumer's ``group.instance.id`` under ``static_membership``.

    Faust hands ``consumer_group_instance_id`` to aiokafka; an app that sets one keeps its own.
    The client id is unique per data dir, and the data dir's lock keeps one worker per data dir,
    so two live workers join under one instance id only when two data dirs were given the same
    ``--client-id`` (see `streamapp.runtime.group.static_membership` for what happens then).
    """
    if not settings.static_membership or settings.client_id is None:
        return
    if app.conf.consumer_group_instance_id is not None:
        return
    with warnings.catch_warnings():
        # Faust warns that a setting is changed after it was read: the read was the check above,
        # and the consumer that uses it does not exist yet.
        warnings.simplefilter("ignore", AlreadyConfiguredWarning)
        app.conf.consumer_group_instance_id = settings.client_id


def run_worker(args: argparse.Namespace) -> int:
    """Run the worker until it is stopped; returns the process exit status."""
    try:
        app = prepare_worker(args)
        check_worker_environment(app, args)
        check_group_protocol(app)
        check_topics(app, args)
        check_dead_letter_topic(app)
    except WorkerSetupError as exc:
        message = " ".join(str(exc).split())  # one line, whatever a cause's text held
        print(f"streamapp worker: {message}", file=sys.stderr)
        return 2
    import warnings

    from faust.cli.faust import cli as faust_cli
    from faust.exceptions import AlreadyConfiguredWarning

    # Faust's worker command sets the web options it was given after the app has read them,
    # and warns about its own doing (22 lines); the options still take effect.
    warnings.filterwarnings(
        "ignore",
        message=r"Setting new value for configuration key 'web_(enabled|port|bind|host)'",
        category=AlreadyConfiguredWarning,
    )
    # Faust's ``--quiet`` leaves out its banner table (the worker logs one line instead, see
    # streamapp.faust_worker) and the spinner's words; logging is not affected.
    # Faust spells the level "warn"; ours follows Python's logging names.
    loglevel = "warn" if args.loglevel == "warning" else args.loglevel
    faust_args = ["--quiet", "-A", args.app, "worker", "-l", loglevel, "--web-host", args.web_host]
    if args.web_port is not None:
        faust_args += ["--web-port", str(args.web_port)]
    status = 0
    try:
        faust_cli.main(args=faust_args, prog_name="streamapp worker", standalone_mode=True)
    except SystemExit as exc:
        status = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    from streamapp.runtime.group.static_membership import fenced_message

    fenced = fenced_message()
    if fenced is not None:
        # Stopped as SIGTERM stops it, which exits 0: say why, and that it did not end well.
        print(f"streamapp worker: {fenced}", file=sys.stderr)
        return FENCED_EXIT_STATUS
    return status
