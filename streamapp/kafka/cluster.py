"""A local Kafka cluster of 3 to 5 nodes on 127.0.0.1, whose nodes can be killed and restarted.

Every node is a broker and a controller at once (KRaft's combined mode), and every node is a
voter of the one controller quorum. With 3 nodes that is 3 JVMs, the fewest that keep both a
majority of the quorum (2 of 3 voters) and 2 in-sync replicas of every partition while any
one node is down; so any node, whichever it is, can be killed and the cluster goes on, which
is what the tests of broker failures need. A separate controller would be a fourth JVM on a
small machine, and a node that could not be killed without stopping the cluster. Topics
default to 3 replicas, ``min.insync.replicas=2`` (`streamapp.kafka.config.CLUSTER_REPLICATION`).

Node ``i`` (from 1) listens on the ``i``-th port (by default ``port``, ``port + 1``, ...) and
keeps its data in ``<data_dir>/node-i``; each is started and recorded as a single broker is
(`streamapp.kafka.broker.LocalKafka.launch`), its record naming every node's port, which is
how ``status`` and ``stop`` given any one port find them all. A node's controller port is
picked when the cluster starts and kept while any node runs: the running nodes' quorum names
it, so a killed node is restarted on it.
Tests: tests/unit/streamapp/kafka/test_cluster.py; tests/integration/test_kafka_cluster.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from streamapp.kafka.broker import (
    DEFAULT_PORT,
    BrokerError,
    BrokerState,
    LocalKafka,
    broker_status,
    cluster_refusal,
    forget_broker,
    new_cluster_id,
    pid_alive,
    recorded_broker,
    terminate_all,
)
from streamapp.kafka.config import HOST, Node
from streamapp.kafka.probe import free_port, port_in_use
from streamapp.kafka.release import KafkaRelease, KafkaVersionError, cache_root, kafka_release

#: The sizes a local cluster may have: at least 3 (a majority of voters and 2 in-sync replicas
#: with one node down), at most 5 (JVMs on one development machine).
CLUSTER_SIZES = range(3, 6)
#: Each node's maximum heap, in MiB: a small cluster's broker and controller need little.
NODE_HEAP_MB = 384


def brokers_refusal(brokers: int) -> str | None:
    """Why ``--brokers`` cannot be this many (None: it can)."""
    if brokers == 1 or brokers in CLUSTER_SIZES:
        return None
    return (
        f"--brokers {brokers}: a local Kafka is 1 broker, or a cluster of "
        f"{CLUSTER_SIZES.start} to {CLUSTER_SIZES.stop - 1} (3 keep a majority of the "
        "controllers and 2 in-sync replicas while one is down)"
    )


def default_cluster_dir(port: int, size: int, release: KafkaRelease) -> Path:
    # Per size too: a node's storage is formatted for its quorum's voters.
    return cache_root() / "brokers" / f"cluster-{size}x{port}-kafka-{release.version}"


class LocalKafkaCluster:
    """``size`` local Kafka nodes, node ``i`` on ``ports[i - 1]`` (by default ``port + i - 1``),
    keeping its data and log under ``<data_dir>/node-i``."""

    def __init__(
        self,
        size: int = 3,
        port: int = DEFAULT_PORT,
        data_dir: str | Path | None = None,
        ready_timeout: float = 120.0,
        kafka_version: str | None = None,
        *,
        ports: Sequence[int] | None = None,
    ) -> None:
        if size not in CLUSTER_SIZES:
            raise BrokerError(brokers_refusal(size) or f"a cluster of {size} brokers")
        self.ports = tuple(ports) if ports is not None else tuple(port + i for i in range(size))
        if len(self.ports) != size or len(set(self.ports)) != size:
            raise BrokerError(f"a cluster of {size} brokers needs {size} ports, not {self.ports}")
        try:
            self.release = kafka_release(kafka_version)
        except KafkaVersionError as exc:
            raise BrokerError(str(exc)) from exc
        self.data_dir = (
            Path(data_dir)
            if data_dir is not None
            else default_cluster_dir(self.ports[0], size, self.release)
        )
        self.nodes = {
            node_id: LocalKafka(
                port=node_port,
                data_dir=self.data_dir / f"node-{node_id}",
                ready_timeout=ready_timeout,
                kafka_version=self.release.version,
                heap_mb=NODE_HEAP_MB,
            )
            for node_id, node_port in enumerate(self.ports, 1)
        }
        #: The JVMs this object started, to reap as they are killed or stopped.
        self._processes: dict[int, subprocess.Popen[bytes]] = {}

    @classmethod
    def found(cls, port: int) -> LocalKafkaCluster | None:
        """The cluster streamapp started with a node on ``port``, from its record (running or
        not); None when streamapp recorded no cluster's node there."""
        state = recorded_broker(port)
        if state is None or not state.cluster_ports:
            return None
        return cls(
            size=len(state.cluster_ports),
            ports=state.cluster_ports,
            data_dir=Path(state.data_dir).parent,
            kafka_version=state.kafka_version,
        )

    @property
    def size(self) -> int:
        return len(self.ports)

    @property
    def kafka_version(self) -> str:
        return self.release.version

    @property
    def bootstrap(self) -> str:
        """Every node's address, as a Kafka client's bootstrap servers."""
        return ",".join(kafka.bootstrap for kafka in self.nodes.values())

    def node_of(self, port: int) -> int:
        """The id of the node listening on ``port``."""
        return self.ports.index(port) + 1

    def status(self) -> dict[int, BrokerState | None]:
        """Node id -> its record while it runs, None when it does not."""
        return {node_id: broker_status(kafka.port) for node_id, kafka in self.nodes.items()}

    def start(self) -> str:
        """Start the nodes that do not run (all of them, the first time) and wait until each
        names every node as a live broker; returns the bootstrap servers."""
        self._start([node_id for node_id, state in self.status().items() if state is None])
        return self.bootstrap

    def restart(self, node_id: int) -> None:
        """Start node ``node_id`` again (after `kill`), and wait until it is back in the
        cluster; a node that runs is left as it is."""
        self._check_node(node_id)
        if broker_status(self.nodes[node_id].port) is None:
            self._start([node_id])

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id``'s JVM, as a crash: nothing flushed, no leadership handed
        over; returns once it is gone."""
        self._check_node(node_id)
        kafka = self.nodes[node_id]
        state = broker_status(kafka.port)
        if state is None:
            raise BrokerError(f"node {node_id} of the cluster ({kafka.bootstrap}) does not run")
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, signal.SIGKILL)
        process = self._processes.pop(node_id, None)
        if process is not None:
            process.wait()
        while pid_alive(state.pid):
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop every node (SIGTERM to all at once: each hands its partitions' leadership to
        the others while they run); False when none of them ran."""
        running = [state for state in self.status().values() if state is not None]
        terminate_all([state.pid for state in running], timeout)
        for node_id, kafka in self.nodes.items():
            forget_broker(kafka.port)
            process = self._processes.pop(node_id, None)
            if process is not None:
                process.wait()
        return bool(running)

    async def coordinator(self, group_id: str, timeout: float = 60.0) -> int:
        """The id of the node that coordinates consumer group ``group_id`` (Kafka's
        FindCoordinator, through aiokafka's admin client); asked again while the answer is a
        retriable error (the group's offsets partition has no leader yet, or the node asked is
        down)."""
        import asyncio

        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.errors import KafkaError

        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    return int(await admin.find_coordinator(group_id))
                except KafkaError as exc:
                    if not exc.retriable or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.5)
        finally:
            await admin.close()

    def _check_node(self, node_id: int) -> None:
        if node_id not in self.nodes:
            raise BrokerError(f"no node {node_id} in a cluster of {self.size} (1 to {self.size})")

    def _refusal(self, node_id: int, state: BrokerState | None) -> str | None:
        """Why node ``node_id``'s port cannot be this cluster's (None: it can)."""
        kafka = self.nodes[node_id]
        if state is None:
            if port_in_use(HOST, kafka.port):
                return (
                    f"port {kafka.port} (node {node_id}) is taken by a process streamapp did "
                    "not start: stop it or choose another --port"
                )
            return None
        if state.cluster_ports != self.ports:
            if state.cluster_ports:
                return cluster_refusal(state)
            return (
                f"port {kafka.port} runs a single broker started by streamapp, not node "
                f"{node_id} of a cluster: stop it first (`streamapp kafka stop --port "
                f"{kafka.port}`) or choose another --port"
            )
        if state.kafka_version != self.kafka_version:
            return (
                f"port {kafka.port} already runs Kafka {state.kafka_version} started by "
                f"streamapp, not {self.kafka_version}: stop it first "
                f"(`streamapp kafka stop --port {kafka.port}`) or choose another --port"
            )
        return None

    def check(self) -> None:
        """Refuse (`BrokerError`) ports that something else than this cluster's nodes holds: a
        single broker, another cluster, another release, or a process streamapp did not
        start."""
        for node_id, state in self.status().items():
            refusal = self._refusal(node_id, state)
            if refusal is not None:
                raise BrokerError(refusal)

    def _start(self, node_ids: list[int]) -> None:
        self.check()
        states = self.status()
        if not node_ids:
            return
        voters = self._voters(states)
        # Every node of a new cluster is formatted with the same id.
        cluster_id = next(
            (found for kafka in self.nodes.values() if (found := kafka.cluster_id())),
            new_cluster_id(),
        )
        launched: dict[int, subprocess.Popen[bytes]] = {}
        try:
            for node_id in node_ids:
                kafka = self.nodes[node_id]
                node = Node(node_id, kafka.port, voters[node_id], kafka.data_dir, voters)
                launched[node_id] = kafka.launch(
                    node, cluster_id=cluster_id, cluster_ports=self.ports
                )
            for node_id, process in launched.items():
                self.nodes[node_id].wait_ready(process, brokers=self.size)
        except BaseException:
            # Nodes started for a cluster that did not come up serve nobody.
            terminate_all([process.pid for process in launched.values()], timeout=30.0)
            for node_id, process in launched.items():
                process.wait()
                forget_broker(self.nodes[node_id].port)
            raise
        self._processes.update(launched)

    def _voters(self, states: dict[int, BrokerState | None]) -> dict[int, int]:
        """Node id -> controller port: while any node runs, the ports its quorum names (a
        node's record keeps its own after it died); otherwise new ones."""
        if any(state is not None for state in states.values()):
            voters: dict[int, int] = {}
            for node_id, kafka in self.nodes.items():
                record = states[node_id] or recorded_broker(kafka.port)
                if record is None:
                    raise BrokerError(
                        f"node {node_id}'s record ({kafka.bootstrap}) is gone while the others "
                        "run: stop the cluster (`streamapp kafka stop`) and start it again"
                    )
                voters[node_id] = record.controller_port
            return voters
        taken = set(self.ports)
        voters = {}
        for node_id in self.nodes:
            controller_port = free_port(HOST)
            while controller_port in taken:
                controller_port = free_port(HOST)
            taken.add(controller_port)
            voters[node_id] = controller_port
        return voters


__all__ = ["CLUSTER_SIZES", "NODE_HEAP_MB", "LocalKafkaCluster", "brokers_refusal"]
