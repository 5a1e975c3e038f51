"""`streamapp worker`: run one worker process of a `streamapp.App` (Faust's worker underneath).

Faust reads its broker, data dir and web port from environment variables when the app's
settings are first used, and explicit values in the user's code do not override them; so the
options are turned into those variables before the app module is imported. streamapp's own
settings (client id, host, rack, capacity, bad-record policy) go onto ``app.streamapp_settings``.

Before Faust starts, every option that can be checked is checked, so that a bad one is
refused with one line naming it and exit status 2 rather than a traceback or a worker that
retries forever: capacity in range, the data dir created and writable, the data dir not in
use by another worker (a lock held for the life of the process, see `tables.data_dir_lock`),
the web port free on its host, and at least one bootstrap address of the broker accepting
a TCP connection. Then the broker is asked whether the app's consumer group runs another
assignor, and whether the source topics its agents consume exist with the partition counts
its tables need (`streamapp.topic_check`): a missing or mis-sized topic is refused here,
by every worker alike, instead of crashing each of them into a loop once Faust runs. Under
the dead-letter bad-record policy, the dead-letter topic is created if it is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import importlib
import os
import socket
import sys
import warnings
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import faust
from faust.exceptions import AlreadyConfiguredWarning
from yarl import URL

from streamapp.bad_records import BadRecordPolicy
from streamapp.settings import (
    SettingsError,
    StreamappSettings,
    add_setting_options,
    options_from_args,
    resolve,
    use_worker_options,
)
from tables.data_dir_lock import DataDirInUse, DataDirLock, lock_data_dir
from tables.identity import ClientIdError, load_or_create_client_id

#: How long to wait for each bootstrap address to accept a TCP connection. A broker on a
#: reachable network answers in milliseconds; a few seconds tell a dead address from a slow
#: one without making a refused start feel hung.
BROKER_CONNECT_TIMEOUT_S = 3.0
#: The port Faust's aiokafka driver uses when a broker URL names none.
KAFKA_DEFAULT_PORT = 9092

#: The exit status of a worker whose group.instance.id another worker took (see
#: `streamapp.runtime.group.static_membership`): not 2, as it was no bad option.
FENCED_EXIT_STATUS = 3

# The data dir lock of this process, held until it exits (see `tables.data_dir_lock`).
_data_dir_lock: DataDirLock | None = None


class WorkerSetupError(RuntimeError):
    """The worker cannot start as asked; the message names the option or app at fault."""


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


def broker_url(address: str) -> str:
    return address if "://" in address else f"kafka://{address}"


def use_broker_option(broker: str | None) -> None:
    """Make ``--broker`` the app's broker; before the app is imported, or Faust ignores it."""
    if broker:
        os.environ["BROKER_URL"] = broker_url(broker)


def app_bootstrap(app: faust.App) -> str:
    """The app's bootstrap servers as a Kafka client takes them (``host:port,...``)."""
    from faust.transport.drivers.aiokafka import server_list

    return ",".join(server_list(app.conf.broker, KAFKA_DEFAULT_PORT))


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


def check_option_ranges(args: argparse.Namespace) -> None:
    """Refuse option values no worker could run with, before anything is imported."""
    if args.capacity is not None and args.capacity < 1:
        raise WorkerSetupError(
            f"--capacity {args.capacity} must be at least 1 "
            "(it is this worker's relative share of work)"
        )
    if args.web_port is not None and not 1 <= args.web_port <= 65535:
        raise WorkerSetupError(f"--web-port {args.web_port} is not a TCP port (1-65535)")
    try:
        resolve(env={}, options=options_from_args(args))
    except SettingsError as exc:  # names the option: "--max-warmup-replicas -1: ..."
        raise WorkerSetupError(str(exc)) from None


def _option(flag: str, value: object, given: bool) -> str:
    """How a message names a setting: the option as typed, or the app's default for it."""
    return f"{flag} {value}" if given else f"{flag} {value} (the app's default)"


def prepare_data_dir(data_dir: Path, name: str) -> None:
    """Create ``data_dir`` if missing and prove it writable, or say why it cannot be used.

    A probe file is written and removed rather than asking `os.access`, which answers for
    permission bits only: it says yes for root, on a read-only mount and on a full disk.
    """
    if data_dir.exists() and not data_dir.is_dir():
        raise WorkerSetupError(f"{name} is not a directory; give a directory for local state")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkerSetupError(
            f"{name} cannot be created: {exc.strerror or exc}; "
            "give a directory this user can create or write"
        ) from None
    probe = data_dir / f".streamapp-write-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)
        probe.unlink()
    except OSError as exc:
        raise WorkerSetupError(
            f"{name} is not writable: {exc.strerror or exc}; give a directory this user can write"
        ) from None


def lock_worker_data_dir(data_dir: Path) -> DataDirLock:
    """Hold ``data_dir`` for this process, or refuse naming the worker that holds it."""
    global _data_dir_lock
    if _data_dir_lock is not None and _data_dir_lock.held:
        if _data_dir_lock.data_dir == data_dir.absolute():
            return _data_dir_lock  # this process prepared the same dir before
        _data_dir_lock.release()
    try:
        _data_dir_lock = lock_data_dir(data_dir)
    except DataDirInUse as exc:
        raise WorkerSetupError(f"{exc}; give each worker its own --data-dir") from None
    except OSError as exc:
        raise WorkerSetupError(
            f"data dir {data_dir}: cannot take its lock file: {exc.strerror or exc}; "
            "give a directory this user can write"
        ) from None
    return _data_dir_lock


def check_web_port(host: str, port: int, name: str) -> None:
    """Refuse a web port that Faust's web server could not bind on ``host``.

    Binds every address ``host`` resolves to, as asyncio's ``create_server`` does, with
    ``SO_REUSEADDR`` set as it sets it: a port left in TIME_WAIT by a worker that just
    stopped is free for the server, so it must not be refused here.
    """
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise WorkerSetupError(f"--web-host {host} cannot be resolved: {exc.strerror}") from None
    for family, kind, proto, _name, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise WorkerSetupError(
                        f"{name} is in use by another process; pick a free port"
                    ) from None
                if exc.errno == errno.EACCES:
                    raise WorkerSetupError(
                        f"{name} needs privileges this user lacks (a port below 1024?); "
                        "pick a port above 1023"
                    ) from None
                if exc.errno == errno.EADDRNOTAVAIL:
                    raise WorkerSetupError(
                        f"--web-host {host} is not an address of this machine"
                    ) from None
                raise WorkerSetupError(
                    f"{name} cannot be bound on {host}: {exc.strerror or exc}"
                ) from None


def _connect_failure(host: str, port: int, timeout_s: float) -> str | None:
    """Why ``host:port`` does not accept a TCP connection, or None when it does."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except socket.gaierror as exc:
        return f"{host}:{port}: cannot resolve {host} ({exc.strerror})"
    except TimeoutError:
        return f"{host}:{port}: no answer within {timeout_s:g} s"
    except ConnectionRefusedError:
        return f"{host}:{port}: connection refused (nothing listens there)"
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"


def check_broker_reachable(
    urls: Iterable[URL], name: str, *, timeout_s: float = BROKER_CONNECT_TIMEOUT_S
) -> None:
    """Refuse a broker none of whose bootstrap addresses accepts a TCP connection.

    One live address is enough (a Kafka client learns the others from it), so the first to
    answer ends the check. Without it, Faust's consumer would retry an unreachable broker
    forever, logging as it goes, and the worker would look alive while doing nothing.
    Transports other than Kafka's are not network addresses and are not checked.
    """
    failures: list[str] = []
    for url in urls:
        if url.scheme not in ("kafka", "aiokafka"):
            return
        # Faust's aiokafka driver fills in the same defaults (`server_list`).
        host = url.host or "127.0.0.1"
        failure = _connect_failure(host, url.port or KAFKA_DEFAULT_PORT, timeout_s)
        if failure is None:
            return
        failures.append(failure)
    if failures:
        raise WorkerSetupError(
            f"{name} is not reachable ({'; '.join(failures)}); check that the broker runs and "
            "the address is right (a local one starts with `streamapp kafka start`)"
        )


def broker_option(app: faust.App, given: str | None) -> str:
    """How a message names the broker: the option as typed, or the app's default."""
    if given:
        return f"--broker {given}"
    shown = ";".join(f"{u.host}:{u.port or KAFKA_DEFAULT_PORT}" for u in app.conf.broker)
    return f"--broker {shown} (the app's default)"


def check_worker_environment(app: faust.App, args: argparse.Namespace) -> None:
    """The checks that need the app's settings: web port, then broker (the slowest)."""
    conf = app.conf
    if conf.web_enabled and conf.web_transport.scheme != "unix":
        name = _option("--web-port", conf.web_port, args.web_port is not None)
        check_web_port(conf.web_bind, conf.web_port, name)
    check_broker_reachable(conf.broker, broker_option(app, args.broker))


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
    prepare_data_dir(data_dir, _option("--data-dir", data_dir, bool(args.data_dir)))
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


def check_group_protocol(app: faust.App) -> None:
    """Refuse to start, naming the cause, when the app's group runs another assignor."""
    from streamapp.group_check import find_foreign_group, foreign_group_message
    from streamapp.partition_assignor import PROTOCOL_NAME, StreamappPartitionAssignor

    assignor = app.conf.PartitionAssignor
    if not (isinstance(assignor, type) and issubclass(assignor, StreamappPartitionAssignor)):
        return  # the app chose another assignor on purpose (bench/rebalance.py runs Faust's)
    found = asyncio.run(find_foreign_group(app_bootstrap(app), app.conf.id, PROTOCOL_NAME))
    if found is not None:
        raise WorkerSetupError(foreign_group_message(found, PROTOCOL_NAME))


def discover_agents(app: faust.App) -> None:
    """Import the modules an autodiscovering app keeps its agents in, as Faust's worker will.

    Importing twice is harmless (Python keeps the modules), and without it the source topics
    of agents outside the app's own module would be unknown to the topic check.
    """
    if app.conf.autodiscover:  # type: ignore[misc,unused-ignore]  # mypy may take the setting for a method
        try:
            app.discover()
        except ImportError as exc:
            raise WorkerSetupError(f"app {app.conf.id!r}: autodiscover: {exc}") from None


def topics_create_command(spec: str, bootstrap: str) -> str:
    return f"streamapp topics create -A {spec} --broker {bootstrap}"


def check_topics(app: faust.App, args: argparse.Namespace) -> None:
    """Refuse to start on a missing or mis-sized source topic; create missing ones if asked.

    Before the consumer joins the group: once it has, a missing topic has no partitions to
    assign (or, on a broker that auto-creates topics, comes with the broker's default count),
    and a mis-sized one fails inside Faust in every worker, in a loop.
    """
    from streamapp import topic_check

    discover_agents(app)
    declared = topic_check.declared_topics(app)
    if not declared.sources:
        return
    settings: StreamappSettings | None = getattr(app, "streamapp_settings", None)
    # --create-topics, STREAMAPP_CREATE_SOURCE_TOPICS or the app's keyword (settings.resolve).
    create = settings is not None and settings.create_source_topics
    bootstrap = app_bootstrap(app)
    try:
        report = asyncio.run(topic_check.check_source_topics(bootstrap, declared, create=create))
    except topic_check.TopicCheckError as exc:
        raise WorkerSetupError(str(exc)) from None
    if report.created:
        made = ", ".join(
            f"{t.name} ({topic_check.partition_count(t.partitions)}, "
            f"replication factor {t.replicas})"
            for t in report.created
        )
        print(f"streamapp worker: created source topics {made}", file=sys.stderr, flush=True)
    if report.problems:
        command = topics_create_command(args.app, bootstrap)
        raise WorkerSetupError(
            topic_check.describe_problems(
                report.problems,
                create_command=f"{command} (or start the worker with --create-topics)",
            )
        )


def check_dead_letter_topic(app: faust.App) -> None:
    """Under the dead-letter policy, create its topic now if it is missing.

    Faust would create it at the first dead letter (one partition, the app's
    ``topic_replication_factor``), as `streamapp.bad_records` asks it to; here, a broker that
    refuses is one line and exit 2, not a worker that crashes on its first bad record.
    """
    from streamapp import topic_check
    from streamapp.bad_records import bad_records_of

    handler = bad_records_of(app)
    if handler is None or handler.policy is not BadRecordPolicy.DEAD_LETTER:
        return
    name = handler.dead_letter_topic_name
    replicas = app.conf.topic_replication_factor
    bootstrap = app_bootstrap(app)

    async def ensure() -> bool:
        if name in await topic_check.read_partition_counts(bootstrap, [name]):
            return False
        made = await topic_check.create_topics(
            bootstrap, [topic_check.SourceTopic(name, partitions=1, replicas=replicas)]
        )
        return bool(made.created)

    try:
        created = asyncio.run(ensure())
    except topic_check.TopicCheckError as exc:
        raise WorkerSetupError(f"dead-letter topic {name}: {exc}") from None
    if created:
        print(
            f"streamapp worker: created dead-letter topic {name} "
            f"(1 partition, replication factor {replicas})",
            file=sys.stderr,
            flush=True,
        )


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
