"""`streamapp worker`: run one worker process of a `streamapp.App` (Faust's worker underneath).

Faust reads its broker, data dir and web port from environment variables when the app's
settings are first used, and explicit values in the user's code do not override them; so the
options are turned into those variables before the app module is imported. streamapp's own
settings (client id, host, rack, capacity) go onto ``app.streamapp_settings``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from dataclasses import replace
from pathlib import Path

import faust

from streamapp.settings import SettingsError, StreamappSettings
from tables.identity import ClientIdError, load_or_create_client_id


class WorkerSetupError(RuntimeError):
    """The worker cannot start as asked; the message names the option or app at fault."""


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-A",
        "--app",
        required=True,
        metavar="MODULE:APP",
        help="the streamapp.App to run, e.g. examples.adclick.app:app",
    )
    parser.add_argument("--broker", help="Kafka bootstrap address (default: the app's broker)")
    parser.add_argument(
        "--web-port", type=int, help="port of the worker's web views, incl. /streamapp/assignment"
    )
    parser.add_argument("--web-host", default="127.0.0.1", help="address the web views bind to")
    parser.add_argument(
        "--data-dir",
        help="where tables' local state and the client id live "
        "(default: the app's datadir, '<app id>-data')",
    )
    parser.add_argument(
        "--client-id", help="stable identity across restarts (default: kept in the data dir)"
    )
    parser.add_argument("--host", help="placement domain for standbys (default: this hostname)")
    parser.add_argument("--rack", help="wider placement domain for standbys (default: none)")
    parser.add_argument("--capacity", type=int, help="relative share of work (default: 1)")
    parser.add_argument(
        "-l",
        "--loglevel",
        default="info",
        choices=["debug", "info", "warning", "error", "critical"],
    )


def _broker_url(address: str) -> str:
    return address if "://" in address else f"kafka://{address}"


def _import_app(spec: str) -> faust.App:
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
    app = getattr(module, attribute, None)
    if not isinstance(app, faust.App):
        raise WorkerSetupError(f"-A {spec!r}: {attribute!r} in {module_name} is not a faust.App")
    return app


def prepare_worker(args: argparse.Namespace) -> faust.App:
    """Import and configure the app as the options say, ready for Faust's worker."""
    if args.broker:
        os.environ["BROKER_URL"] = _broker_url(args.broker)
    if args.data_dir:
        os.environ["APP_DATADIR"] = str(Path(args.data_dir).absolute())
    if args.web_port is not None:
        os.environ["WEB_PORT"] = str(args.web_port)
    os.environ["WEB_BIND"] = args.web_host
    os.environ["WEB_HOST"] = args.web_host
    for option, name in (("host", "HOST"), ("rack", "RACK"), ("capacity", "CAPACITY")):
        value = getattr(args, option)
        if value is not None:
            os.environ[f"STREAMAPP_{name}"] = str(value)
    app = _import_app(args.app)
    base = getattr(app, "streamapp_settings", None)
    try:
        settings = (base or StreamappSettings()).with_env()
        data_dir = Path(app.conf.datadir).absolute()
        client_id = load_or_create_client_id(data_dir, args.client_id or settings.client_id)
    except (SettingsError, ClientIdError) as exc:
        raise WorkerSetupError(str(exc)) from exc
    app.streamapp_settings = replace(settings, client_id=client_id)  # type: ignore[attr-defined]
    os.environ["STREAMAPP_CLIENT_ID"] = client_id
    return app


def check_group_protocol(app: faust.App) -> None:
    """Refuse to start, naming the cause, when the app's group runs another assignor."""
    from faust.transport.drivers.aiokafka import server_list

    from streamapp.group_check import find_foreign_group, foreign_group_message
    from streamapp.partition_assignor import PROTOCOL_NAME, StreamappPartitionAssignor

    assignor = app.conf.PartitionAssignor
    if not (isinstance(assignor, type) and issubclass(assignor, StreamappPartitionAssignor)):
        return  # the app chose another assignor on purpose (bench/rebalance.py runs Faust's)
    bootstrap = ",".join(server_list(app.conf.broker, 9092))
    found = asyncio.run(find_foreign_group(bootstrap, app.conf.id, PROTOCOL_NAME))
    if found is not None:
        raise WorkerSetupError(foreign_group_message(found, PROTOCOL_NAME))


def run_worker(args: argparse.Namespace) -> int:
    """Run the worker until it is stopped; returns the process exit status."""
    try:
        app = prepare_worker(args)
        check_group_protocol(app)
    except WorkerSetupError as exc:
        print(f"streamapp worker: {exc}", file=sys.stderr)
        return 2
    from faust.cli.faust import cli as faust_cli

    # Faust spells the level "warn"; ours follows Python's logging names.
    loglevel = "warn" if args.loglevel == "warning" else args.loglevel
    faust_args = ["-A", args.app, "worker", "-l", loglevel, "--web-host", args.web_host]
    if args.web_port is not None:
        faust_args += ["--web-port", str(args.web_port)]
    try:
        faust_cli.main(args=faust_args, prog_name="streamapp worker", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0
