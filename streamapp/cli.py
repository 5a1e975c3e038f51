"""The `streamapp` command line: worker, topics, plan, kafka, demo."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from streamapp.kafka.broker import DEFAULT_PORT
from streamapp.kafka.command import run_kafka_command
from streamapp.kafka.release import DEFAULT_KAFKA_VERSION, KAFKA_VERSION_ENV, TESTED_KAFKA_VERSIONS
from streamapp.settings import add_setting_options
from streamapp.worker import (
    WORKER_DESCRIPTION,
    add_app_arguments,
    add_worker_arguments,
    run_worker,
)

if TYPE_CHECKING:
    from streamapp.topic_check import SourceTopic


def _topics(args: argparse.Namespace) -> int:
    """`streamapp topics create`: every topic the app declares, as its code declares it: the
    sources its agents consume, and the topics its joins and aggregates write to (outputs,
    late records) and its dead-letter topic."""
    import asyncio

    from streamapp import topic_check
    from streamapp.broker_address import app_bootstrap, broker_option, use_broker_option
    from streamapp.preflight import (
        WorkerSetupError,
        check_broker_reachable,
        discover_agents,
        topics_create_command,
    )
    from streamapp.worker import import_app

    def refuse(message: str) -> int:
        print(f"streamapp topics {args.action}: {' '.join(message.split())}", file=sys.stderr)
        return 2

    if args.replication_factor is not None and args.replication_factor < 1:
        return refuse(f"--replication-factor {args.replication_factor} must be at least 1")
    use_broker_option(args.broker)
    try:
        app = import_app(args.app)
        discover_agents(app)
        check_broker_reachable(app.conf.broker, broker_option(app, args.broker))
    except WorkerSetupError as exc:
        return refuse(str(exc))
    declared = topic_check.declared_topics(app)
    written = _written_topics(app)
    if not declared.sources and not written:
        print(f"{app.conf.id}: no topics to create (its agents consume none it must be given)")
        return 0
    bootstrap = app_bootstrap(app)
    try:
        report = asyncio.run(
            topic_check.check_source_topics(
                bootstrap, declared, create=True, replication_factor=args.replication_factor
            )
        )
    except topic_check.TopicCheckError as exc:
        return refuse(str(exc))
    if report.problems:
        # What was found is not news when the answer is a refusal: the one line says it all.
        for topic in report.created:
            print(_created_line(topic, args.replication_factor))
        command = topics_create_command(args.app, bootstrap)
        return refuse(topic_check.describe_problems(report.problems, create_command=command))
    try:
        made, found = asyncio.run(_create_written(bootstrap, written, args.replication_factor))
    except topic_check.TopicCheckError as exc:
        return refuse(str(exc))
    for topic in report.created:
        print(_created_line(topic, args.replication_factor))
    for topic, why in made:
        print(f"{_created_line(topic, args.replication_factor)}: {why}")
    for name, partitions in report.already_there:
        print(f"already there: {name} ({topic_check.partition_count(partitions)})")
    for name, partitions, why in found:
        print(f"already there: {name} ({topic_check.partition_count(partitions)}): {why}")
    return 0


def _created_line(topic: SourceTopic, replication_factor: int | None) -> str:
    from streamapp import topic_check

    replicas = replication_factor or topic.replicas
    return (
        f"created {topic.name} ({topic_check.partition_count(topic.partitions)}, "
        f"replication factor {replicas})"
    )


def _written_topics(app: Any) -> list[tuple[SourceTopic, str]]:
    """The topics the app writes to that `topics create` makes besides its sources: those its
    joins and aggregates declare (outputs, late records) and, under the dead-letter policy, its
    dead-letter topic (one partition, as the worker makes it); with why each is there."""
    from streamapp.bad_records import BadRecordPolicy, bad_records_of
    from streamapp.joins.declared import written_topics
    from streamapp.topic_check import SourceTopic

    default_replicas = int(app.conf.topic_replication_factor)
    out = [
        (SourceTopic(t.name, t.partitions, t.replicas or default_replicas), t.why)
        for t in written_topics(app)
    ]
    handler = bad_records_of(app)
    if handler is not None and handler.policy is BadRecordPolicy.DEAD_LETTER:
        name = handler.dead_letter_topic_name
        if all(topic.name != name for topic, _why in out):
            out.append((SourceTopic(name, 1, default_replicas), "dead letters (bad_record_policy)"))
    return out


async def _create_written(
    bootstrap: str, written: list[tuple[SourceTopic, str]], replication_factor: int | None
) -> tuple[list[tuple[SourceTopic, str]], list[tuple[str, int, str]]]:
    """Create those of ``written`` that do not exist; returns (created, with why) and (found
    already: name, partition count, why)."""
    from streamapp import topic_check

    if not written:
        return [], []
    existing = await topic_check.read_partition_counts(bootstrap, [t.name for t, _ in written])
    missing = [t for t, _ in written if t.name not in existing]
    made = await topic_check.create_topics(
        bootstrap, missing, replication_factor=replication_factor
    )
    why = {t.name: reason for t, reason in written}
    created = {t.name for t in made.created}
    for topic in made.already_there:  # created by someone else meanwhile
        existing[topic.name] = topic.partitions
    return (
        [(t, why[t.name]) for t in made.created],
        [(t.name, existing[t.name], why[t.name]) for t, _ in written if t.name not in created],
    )


def _group(args: argparse.Namespace) -> int:
    """`streamapp group`: the whole group from the broker, and what a change would do."""
    import asyncio
    import json
    import logging

    from yarl import URL

    from streamapp.broker_address import broker_url
    from streamapp.group_scenario import GroupSettings
    from streamapp.ops import group_view
    from streamapp.ops.group_read import BrokerUnavailable, read_live_group
    from streamapp.preflight import WorkerSetupError, check_broker_reachable
    from streamapp.settings import SettingsError, options_from_args, resolve

    def refuse(message: str) -> int:
        print(f"streamapp group: {' '.join(message.split())}", file=sys.stderr)
        return 2

    # aiokafka logs each failed connection itself; the one line below says it for all of them.
    logging.getLogger("aiokafka").addHandler(logging.NullHandler())
    logging.getLogger("aiokafka").propagate = False
    try:
        change = group_view.parse_change(args.what_if) if args.what_if is not None else None
        # No app here: the what-if plans with these options, else STREAMAPP_*, else defaults.
        settings = resolve(options=options_from_args(args))
        urls = [URL(broker_url(address)) for address in args.broker.split(",")]
        check_broker_reachable(urls, f"--broker {args.broker}")
        view, counts = asyncio.run(read_live_group(args.broker, args.app_id))
        found = (
            group_view.what_if(
                view,
                change,
                topics=counts,
                settings=GroupSettings(
                    num_standbys=settings.num_standby_replicas,
                    acceptable_recovery_lag=settings.acceptable_recovery_lag,
                    max_warmup_replicas=settings.max_warmup_replicas,
                ),
            )
            if change is not None
            else None
        )
    except (group_view.GroupViewError, SettingsError, WorkerSetupError) as exc:
        return refuse(str(exc))
    except BrokerUnavailable as exc:
        # Reachable, yet it did not answer: the broker's trouble, not a bad option.
        print(f"streamapp group: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    if args.format == "json":
        out = group_view.group_json(view)
        if found is not None:
            out["what_if"] = group_view.what_if_json(found)
        print(json.dumps(out, indent=2))
    else:
        print(group_view.format_group(view))
        if found is not None:
            print()
            print(group_view.format_what_if(found))
    return 0


def _plan(args: argparse.Namespace) -> int:
    from assignor.cli import main as plan_main

    return int(plan_main(["plan", *args.plan_args], prog="streamapp"))


def _demo(args: argparse.Namespace) -> int:
    from streamapp.demo import main as demo_main

    return int(demo_main(args.demo_args))


class _OneLineErrorParser(argparse.ArgumentParser):
    """A command's bad option is one line naming it, like every other refusal.

    argparse's default repeats the whole usage first, which buries the one line that says
    what is wrong (the worker's usage alone is five lines).
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamapp",
        description="Stream processing on Kafka; partition assignment keeps state where it lives.",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_OneLineErrorParser
    )

    worker = commands.add_parser(
        "worker", help="run one worker process of a streamapp.App", description=WORKER_DESCRIPTION
    )
    add_worker_arguments(worker)
    worker.set_defaults(handler=run_worker)

    topics = commands.add_parser(
        "topics",
        help="create the topics an app declares with the partition counts its code declares",
        description="Create the topics an app declares: its source topics (the topics its "
        "agents consume, except those Faust creates itself: changelogs, leader and repartition "
        "topics), the topics its joins and aggregates write to (outputs, late records) and, "
        "under the dead-letter policy, its dead-letter topic; each with the partition count "
        "the app declares (a topic's partitions=, else the join's or aggregate's, else the "
        "app's topic_partitions; one for dead-letter topics). Says what it created and what "
        "was already there, and leaves the latter as they are. Refuses, creating nothing, when "
        "topics that must be co-partitioned would differ in partition count.",
    )
    topics.add_argument("action", choices=["create"], help="create the missing topics")
    add_app_arguments(
        topics, app_help="the app whose topics to create, e.g. examples.adclick.app:app"
    )
    topics.add_argument(
        "--replication-factor",
        type=int,
        metavar="N",
        help="replicas of each created topic (default: the topic's replicas=, else the app's "
        "topic_replication_factor, which is 1 unless the app sets it)",
    )
    topics.set_defaults(handler=_topics)

    kafka = commands.add_parser(
        "kafka",
        help="a real local Kafka broker (KRaft, 127.0.0.1 only)",
        description=f"A real local Apache Kafka broker ({DEFAULT_KAFKA_VERSION} unless "
        "--kafka-version or $STREAMAPP_KAFKA_VERSION picks another; KRaft mode, one "
        "broker+controller, bound to 127.0.0.1 only), or a cluster of them (start --brokers 3), "
        "for development and the tests.",
    )
    actions = kafka.add_subparsers(
        dest="action", required=True, metavar="ACTION", parser_class=_OneLineErrorParser
    )

    def port_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--port", type=int, default=DEFAULT_PORT, help="listener port (default: %(default)s)"
        )

    start = actions.add_parser(
        "start",
        help="start a broker and print its address",
        description="Start a broker: resolve its jars through Maven Central on the first run, "
        "format its storage, start it, wait until it answers, and print its bootstrap address "
        "(127.0.0.1:PORT) as the last line. The broker keeps running after this exits; a broker "
        "streamapp started that already runs on the port is reused if it runs the same Kafka "
        "release, and refused otherwise. With --brokers N (3 to 5), a cluster: node i on "
        "PORT+i-1, every node a broker and a controller, topics replicated 3 times with "
        "min.insync.replicas=2; the last line is every node's address, comma-separated, and a "
        "cluster whose nodes partly run gets the others started again.",
    )

    def version_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--kafka-version",
            metavar="VERSION",
            help=f"the Apache Kafka release (default: ${KAFKA_VERSION_ENV}, else "
            f"{DEFAULT_KAFKA_VERSION}); tested: {' and '.join(TESTED_KAFKA_VERSIONS)}, any "
            "3.3+ or 4.x release is accepted",
        )

    port_option(start)
    start.add_argument(
        "--dir",
        help="data and log directory; the broker's log stays there as broker.log, a cluster "
        "node's as node-I/broker.log (default: under ~/.cache/streamapp, or $STREAMAPP_CACHE, "
        "one per port and version)",
    )
    start.add_argument(
        "--timeout",
        type=float,
        default=90.0,
        help="seconds to wait for the broker to answer (default: %(default)s)",
    )
    version_option(start)
    start.add_argument(
        "--brokers",
        type=int,
        default=1,
        metavar="N",
        help="1 broker (the default), or a cluster of 3 to 5 on ports PORT, PORT+1, ...",
    )
    stop = actions.add_parser(
        "stop",
        help="stop the broker (or cluster) streamapp started on a port",
        description="Stop the broker streamapp started on the port, by the pid it recorded "
        "(never by process name), and wait for it to exit. A port of a cluster's node stops "
        "every node of the cluster.",
    )
    port_option(stop)
    status = actions.add_parser(
        "status",
        help="say whether a broker (or cluster) streamapp started runs on a port",
        description="Say whether a broker streamapp started runs on the port, and where its "
        "data is; for a cluster's node, one line per node of the cluster. Exit status 0 when "
        "it runs (every node of a cluster), 3 when it does not.",
    )
    port_option(status)
    fetch = actions.add_parser(
        "fetch",
        help="only resolve the broker's jars (first run: through Maven Central)",
        description="Resolve a Kafka release's jars into the cache and print where.",
    )
    version_option(fetch)
    kafka.set_defaults(
        handler=run_kafka_command,
        port=DEFAULT_PORT,
        dir=None,
        timeout=90.0,
        kafka_version=None,
        brokers=1,
    )

    group = commands.add_parser(
        "group",
        help="the whole group as the broker sees it: who holds what, replica lag; what-ifs",
        description="Show a streamapp app's consumer group from the broker alone (no worker is "
        "asked): each member's client id, host, rack and capacity, the active, standby and "
        "warmup partitions it holds, each standby's and warmup's lag, the plan's generation and "
        "the group protocol. With --what-if, plan the group as the leader would after the "
        "change and show what would move and how many changelog records would be replayed.",
    )
    group.add_argument("app_id", metavar="APP_ID", help="the app's id (its consumer group)")
    group.add_argument("--broker", required=True, help="Kafka bootstrap address, host:port")
    group.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="table for people, json for tools (default: table)",
    )
    group.add_argument(
        "--what-if",
        metavar="CHANGE",
        help="'leave CLIENT_ID' (that worker stops) or 'add N' (N new workers, no local state)",
    )
    # The settings the leader plans with are the app's, which the broker does not have.
    add_setting_options(
        group,
        ["num_standby_replicas", "acceptable_recovery_lag", "max_warmup_replicas"],
        app=False,
    )
    group.set_defaults(handler=_group)

    plan = commands.add_parser(
        "plan",
        add_help=False,
        help="compute an assignment for a scenario (python -m assignor plan)",
    )
    plan.add_argument("plan_args", nargs=argparse.REMAINDER)
    plan.set_defaults(handler=_plan)

    demo = commands.add_parser(
        "demo", add_help=False, help="the ad-click join demo end to end on a local broker"
    )
    demo.add_argument("demo_args", nargs=argparse.REMAINDER)
    demo.set_defaults(handler=_demo)
    return parser


# Commands whose own parser owns every argument, `--help` included.
_PASSTHROUGH = {"plan": _plan, "demo": _demo}


#: The exit status of a process that a closed pipe stopped (128 + SIGPIPE), as for `cat` or `grep`.
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in _PASSTHROUGH:
            rest = argparse.Namespace(plan_args=argv[1:], demo_args=argv[1:])
            return _PASSTHROUGH[argv[0]](rest)
        args = build_parser().parse_args(argv)
        handler = args.handler
        return int(handler(args))
    except BrokenPipeError:
        # The reader went away (`streamapp plan big.json | head`): stop quietly, as Unix tools do.
        # Standard output is pointed at /dev/null so that Python's flush at exit does not raise
        # the same error again as an "Exception ignored" message.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
