"""`streamapp kafka`: fetch a Kafka release, and start, stop or inspect a local broker or cluster.

Each step is one line: progress and refusals on stderr, and what a script reads (the bootstrap
address of ``start``, the jars' directory of ``fetch``) alone on stdout.
Tests: tests/unit/streamapp/kafka/test_command.py; tests/integration/test_kafka_broker.py,
tests/integration/test_kafka_cluster.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streamapp.kafka.broker import BrokerError, LocalKafka, broker_status
from streamapp.kafka.cluster import LocalKafkaCluster, brokers_refusal
from streamapp.kafka.release import KafkaJarsError, resolve_kafka_jars


def run_kafka_command(args: argparse.Namespace) -> int:
    """`streamapp kafka ACTION`: fetch, start, stop or status, as the options say."""
    try:
        if args.action == "start" and args.brokers != 1:
            return _kafka_cluster_start(args)
        cluster = None if args.action == "fetch" else LocalKafkaCluster.found(args.port)
        if cluster is not None and args.action in ("stop", "status"):
            return (
                _kafka_cluster_stop(cluster)
                if args.action == "stop"
                else _kafka_cluster_status(cluster)
            )
        broker = LocalKafka(
            port=args.port,
            data_dir=Path(args.dir) if args.dir else None,
            ready_timeout=args.timeout,
            kafka_version=args.kafka_version,
        )
        if args.action == "fetch":
            print(resolve_kafka_jars(broker.release))
        elif args.action == "start":
            # One line on stderr per step (resolving the jars says so itself, first run only);
            # stdout is the bootstrap address alone, for scripts.
            running = broker_status(args.port)
            if running is not None and (
                running.cluster_ports or running.kafka_version != broker.kafka_version
            ):
                broker.start()  # refuses, naming the cluster or the release that runs there
            if running is not None:
                print(
                    f"streamapp: Kafka {running.kafka_version} already runs on "
                    f"{running.bootstrap} (pid {running.pid}, data in {running.data_dir})",
                    file=sys.stderr,
                    flush=True,
                )
                print(running.bootstrap)
                return 0
            print(
                f"streamapp: starting Kafka {broker.kafka_version} (data in {broker.data_dir})",
                file=sys.stderr,
                flush=True,
            )
            bootstrap = broker.start()
            print(
                f"streamapp: Kafka ready on {bootstrap} (its log: {broker.log_file})",
                file=sys.stderr,
                flush=True,
            )
            print(bootstrap)
        elif args.action == "stop":
            if broker.stop():
                print(f"stopped the broker on {broker.bootstrap}")
            else:
                print(f"no broker started by streamapp runs on port {args.port}")
        else:
            state = broker_status(args.port)
            if state is None:
                print(f"not running: no broker started by streamapp on port {args.port}")
                return 3
            print(
                f"running: {state.bootstrap} (Kafka {state.kafka_version}, pid {state.pid}, "
                f"data in {state.data_dir})"
            )
    except (BrokerError, KafkaJarsError) as exc:
        print(f"streamapp kafka {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


def _kafka_cluster_start(args: argparse.Namespace) -> int:
    """`streamapp kafka start --brokers N`: as for one broker, one line on stderr per step and
    the bootstrap servers alone on stdout."""
    refusal = brokers_refusal(args.brokers)
    if refusal is not None:
        raise BrokerError(refusal)
    cluster = LocalKafkaCluster(
        args.brokers,
        port=args.port,
        data_dir=Path(args.dir) if args.dir else None,
        ready_timeout=args.timeout,
        kafka_version=args.kafka_version,
    )
    cluster.check()
    what = f"a cluster of {cluster.size} Kafka {cluster.kafka_version} brokers"
    missing = [node_id for node_id, state in cluster.status().items() if state is None]
    if not missing:
        print(
            f"streamapp: {what} already runs on {cluster.bootstrap} (data in {cluster.data_dir})",
            file=sys.stderr,
            flush=True,
        )
    else:
        nodes = "" if len(missing) == cluster.size else f"node {', '.join(map(str, missing))} of "
        print(
            f"streamapp: starting {nodes}{what} on ports "
            f"{', '.join(map(str, cluster.ports))} (data in {cluster.data_dir})",
            file=sys.stderr,
            flush=True,
        )
        cluster.start()
        print(
            f"streamapp: Kafka cluster ready on {cluster.bootstrap} (their logs: "
            f"{cluster.data_dir / 'node-*' / 'broker.log'})",
            file=sys.stderr,
            flush=True,
        )
    print(cluster.bootstrap)
    return 0


def _kafka_cluster_stop(cluster: LocalKafkaCluster) -> int:
    what = f"the cluster of {cluster.size} brokers on {cluster.bootstrap}"
    print(f"stopped {what}" if cluster.stop() else f"no node of {what} was running")
    return 0


def _kafka_cluster_status(cluster: LocalKafkaCluster) -> int:
    """One line per node; exit status 0 when every node runs, 3 when one does not."""
    states = cluster.status()
    for node_id, state in states.items():
        node = f"node {node_id} of {cluster.size}"
        if state is not None:
            print(
                f"running: {state.bootstrap} ({node}, Kafka {state.kafka_version}, "
                f"pid {state.pid}, data in {state.data_dir})"
            )
        else:
            kafka = cluster.nodes[node_id]
            print(
                f"not running: {kafka.bootstrap} ({node}, data in {kafka.data_dir}; "
                f"`streamapp kafka start --brokers {cluster.size} --port {cluster.ports[0]}` "
                "starts it again)"
            )
    return 0 if all(state is not None for state in states.values()) else 3
