"""`streamapp worker`'s checks before Faust starts: a bad option or app is refused with one line.

Every option that can be checked is checked, so that a bad one is refused with one line naming
it and exit status 2 (`WorkerSetupError`, printed by `streamapp.worker.run_worker`) rather than
a traceback or a worker that retries forever: capacity in range, the data dir created and
writable, the data dir not in use by another worker (a lock held for the life of the process,
see `tables.data_dir_lock`), the web port free on its host, and at least one bootstrap address
of the broker accepting a TCP connection. Then the broker is asked whether the app's consumer
group runs another assignor, and whether the source topics its agents consume exist with the
partition counts its tables need (`streamapp.topic_check`): a missing or mis-sized topic is
refused here, by every worker alike, instead of crashing each of them into a loop once Faust
runs. Under the dead-letter bad-record policy, the dead-letter topic is created if it is
missing.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import socket
import sys
from collections.abc import Iterable
from pathlib import Path

import faust
from yarl import URL

from streamapp.bad_records import BadRecordPolicy
from streamapp.broker_address import KAFKA_DEFAULT_PORT, app_bootstrap, broker_option
from streamapp.settings import SettingsError, StreamappSettings, options_from_args, resolve
from tables.data_dir_lock import DataDirInUse, DataDirLock, lock_data_dir

#: How long to wait for each bootstrap address to accept a TCP connection. A broker on a
#: reachable network answers in milliseconds; a few seconds tell a dead address from a slow
#: one without making a refused start feel hung.
BROKER_CONNECT_TIMEOUT_S = 3.0

# The data dir lock of this process, held until it exits (see `tables.data_dir_lock`).
_data_dir_lock: DataDirLock | None = None


class WorkerSetupError(RuntimeError):
    """The worker cannot start as asked; the message names the option or app at fault."""


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


def describe_option(flag: str, value: object, given: bool) -> str:
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


def check_worker_environment(app: faust.App, args: argparse.Namespace) -> None:
    """The checks that need the app's settings: web port, then broker (the slowest)."""
    conf = app.conf
    if conf.web_enabled and conf.web_transport.scheme != "unix":
        name = describe_option("--web-port", conf.web_port, args.web_port is not None)
        check_web_port(conf.web_bind, conf.web_port, name)
    check_broker_reachable(conf.broker, broker_option(app, args.broker))


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
