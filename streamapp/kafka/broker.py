"""Start, stop and inspect one local KRaft Kafka broker+controller bound to 127.0.0.1.

Each node of a local cluster (`streamapp.kafka.cluster`) is started the same way, by
`LocalKafka.launch`, with its place in the cluster recorded beside its pid.

The broker runs detached (its own session) so it outlives the command that started it; its pid
and ports are recorded in ``<dir>/broker.json`` and in a per-port registry entry under the
cache, which is how ``stop`` and ``status`` find it. Stopping signals that recorded pid only,
after checking that the pid still belongs to a Kafka JVM started on that directory (pids get
reused), never a process found by name.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from streamapp.kafka.config import (
    HOST,
    Node,
    log4j2_properties,
    log4j_properties,
    server_properties,
    single_node,
)
from streamapp.kafka.probe import free_port, live_brokers, port_in_use
from streamapp.kafka.release import (
    KafkaRelease,
    KafkaVersionError,
    cache_root,
    kafka_release,
    resolve_kafka_jars,
)

DEFAULT_PORT = 9092
#: A single broker's maximum heap, in MiB.
SINGLE_HEAP_MB = 512
_STATE_FILE = "broker.json"
#: Written when storage is formatted: which release's storage a data dir holds.
_VERSION_FILE = "kafka-version"
#: Registry entries written before the version was recorded were all of the old pin.
_UNRECORDED_VERSION = "3.9.1"


class BrokerError(RuntimeError):
    """A local broker could not be started, found or stopped; the message says what to do."""


@dataclass(frozen=True)
class BrokerState:
    pid: int
    port: int
    controller_port: int
    data_dir: str
    kafka_version: str = _UNRECORDED_VERSION
    node_id: int = 1
    #: Every node's port, by node id, for a node of a cluster; empty for a single broker.
    cluster_ports: tuple[int, ...] = ()

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"


def _registry_entry(port: int) -> Path:
    return cache_root() / "brokers" / f"{port}.json"


def default_data_dir(port: int, release: KafkaRelease | None = None) -> Path:
    # One dir per release: Kafka cannot start on storage a newer release formatted, so a
    # default dir shared between versions would break the first time one picks 3.9.1 again.
    release = release or kafka_release()
    return cache_root() / "brokers" / f"broker-{port}-kafka-{release.version}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child (not yet reaped) still answers kill(0); treat it as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _pid_is_our_broker(state: BrokerState) -> bool:
    """The recorded pid still runs the Kafka JVM we started on this data dir."""
    if not pid_alive(state.pid):
        return False
    try:
        cmdline = Path(f"/proc/{state.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    config = str(Path(state.data_dir) / "server.properties").encode()
    return b"kafka.Kafka" in cmdline and config in cmdline


def _read_state(port: int) -> BrokerState | None:
    entry = _registry_entry(port)
    try:
        raw = json.loads(entry.read_text())
        return BrokerState(
            pid=int(raw["pid"]),
            port=int(raw["port"]),
            controller_port=int(raw["controller_port"]),
            data_dir=str(raw["data_dir"]),
            kafka_version=str(raw.get("kafka_version", _UNRECORDED_VERSION)),
            node_id=int(raw.get("node_id", 1)),
            cluster_ports=tuple(int(port) for port in raw.get("cluster_ports", ())),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_state(state: BrokerState) -> None:
    fields = dict(state.__dict__)
    if not state.cluster_ports:  # a single broker's entry, as it always was
        del fields["node_id"], fields["cluster_ports"]
    text = json.dumps(fields, indent=2) + "\n"
    entry = _registry_entry(state.port)
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text(text)
    (Path(state.data_dir) / _STATE_FILE).write_text(text)


def _kill_unrecorded(process: subprocess.Popen[bytes]) -> None:
    """Kill and reap a broker just started whose state could not be written.

    The broker runs in its own session, so nothing stops it when its starter dies; only the
    recorded pid lets ``stop`` and ``status`` find it. A failed write (an unwritable cache) or
    an interrupt (Ctrl-C, or SIGTERM raised as an exception) before it would leave a broker
    running that no command can find, holding its ports and its data dir's lock. It served
    nobody yet: killed outright.
    """
    process.kill()
    process.wait()


def broker_status(port: int = DEFAULT_PORT) -> BrokerState | None:
    """The broker streamapp started on this port, if it is still running."""
    state = _read_state(port)
    if state is not None and _pid_is_our_broker(state):
        return state
    return None


def recorded_broker(port: int) -> BrokerState | None:
    """What streamapp recorded of the broker it started on this port, running or not."""
    return _read_state(port)


def forget_broker(port: int) -> None:
    """Drop the record of the broker on this port (it was stopped)."""
    _registry_entry(port).unlink(missing_ok=True)


def cluster_refusal(state: BrokerState) -> str:
    """Why a port that runs a node of a cluster is not a single broker's to start or stop."""
    ports = ",".join(str(port) for port in state.cluster_ports)
    return (
        f"port {state.port} runs node {state.node_id} of a cluster of "
        f"{len(state.cluster_ports)} brokers started by streamapp (ports {ports}), not a "
        f"single broker: use `--brokers {len(state.cluster_ports)}`, stop it first "
        f"(`streamapp kafka stop --port {state.port}`) or choose another --port"
    )


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise BrokerError(
            "no `java` on PATH: install a JDK 17+ (e.g. `apt-get install openjdk-17-jdk-headless`)"
        )
    return java


def new_cluster_id() -> str:
    """A new KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def terminate(pid: int, timeout: float = 60.0) -> None:
    """SIGTERM ``pid`` (a broker streamapp started) and wait for it to exit; SIGKILL it after
    ``timeout``."""
    terminate_all([pid], timeout)


def terminate_all(pids: list[int], timeout: float = 60.0) -> None:
    """SIGTERM every one of ``pids`` at once and wait for them to exit; SIGKILL those left
    after ``timeout``."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(pid) for pid in pids):
        time.sleep(0.2)
    # A controlled shutdown that hangs past the timeout is not worth waiting for in dev.
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while any(pid_alive(pid) for pid in pids):
        time.sleep(0.1)


class LocalKafka:
    """One local broker+controller on ``port``, keeping its data and log under ``data_dir``."""

    def __init__(
        self,
        port: int = DEFAULT_PORT,
        data_dir: str | Path | None = None,
        ready_timeout: float = 90.0,
        kafka_version: str | None = None,
        *,
        heap_mb: int = SINGLE_HEAP_MB,
    ) -> None:
        """``kafka_version`` None: ``$STREAMAPP_KAFKA_VERSION``, else the default (4.4.0)."""
        try:
            self.release = kafka_release(kafka_version)
        except KafkaVersionError as exc:
            raise BrokerError(str(exc)) from exc
        self.port = port
        self.data_dir = (
            Path(data_dir) if data_dir is not None else default_data_dir(port, self.release)
        )
        self.ready_timeout = ready_timeout
        self.heap_mb = heap_mb

    @property
    def kafka_version(self) -> str:
        return self.release.version

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    def start(self) -> str:
        """Start the broker (or find the one already running) and return its bootstrap address."""
        running = broker_status(self.port)
        if running is not None:
            if running.cluster_ports:
                raise BrokerError(cluster_refusal(running))
            if running.kafka_version != self.kafka_version:
                raise BrokerError(
                    f"port {self.port} already runs Kafka {running.kafka_version} started by "
                    f"streamapp, not {self.kafka_version}: stop it first "
                    f"(`streamapp kafka stop --port {self.port}`) or choose another --port"
                )
            return running.bootstrap
        if port_in_use(HOST, self.port):
            raise BrokerError(
                f"port {self.port} is taken by a process streamapp did not start: "
                "stop it or choose another port with --port"
            )
        process = self.launch(single_node(self.port, free_port(HOST), self.data_dir))
        self.wait_ready(process)
        return self.bootstrap

    def launch(
        self, node: Node, *, cluster_id: str | None = None, cluster_ports: tuple[int, ...] = ()
    ) -> subprocess.Popen[bytes]:
        """Write ``node``'s config, format its storage if it has none (as cluster
        ``cluster_id``, new if None), start its JVM and record it; without waiting for it to
        answer (a node of a cluster answers only once a majority of its voters run)."""
        self._check_storage_version()
        java = _java()
        try:
            jars = resolve_kafka_jars(self.release)
        except RuntimeError as exc:
            raise BrokerError(str(exc)) from exc
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "server.properties"
        config.write_text(server_properties(node))
        if self.release.uses_log4j2:
            log_config = self.data_dir / "log4j2.properties"
            log_config.write_text(log4j2_properties(self.log_file))
            log_flag = f"-Dlog4j2.configurationFile={log_config}"
        else:
            log_config = self.data_dir / "log4j.properties"
            log_config.write_text(log4j_properties(self.log_file))
            log_flag = f"-Dlog4j.configuration=file:{log_config}"
        jvm = [
            java,
            f"-Xmx{self.heap_mb}m",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-XX:+ExitOnOutOfMemoryError",
            "-XX:TieredStopAtLevel=1",  # C1 only: faster start, ample for a dev broker
            "-Djava.awt.headless=true",
            log_flag,
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            f"{jars}/*",
        ]
        if not (self.data_dir / "log" / "meta.properties").exists():
            self._format_storage(jvm, config, cluster_id or new_cluster_id())
        with (self.data_dir / "broker.out").open("ab") as console:
            process = subprocess.Popen(
                [*jvm, "kafka.Kafka", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlive the command that started it
            )
            # Until its state is written nothing but `process` knows this broker: from the very
            # next statement on, a failed write or an interrupt kills it (`_kill_unrecorded`).
            try:
                _write_state(
                    BrokerState(
                        process.pid,
                        self.port,
                        node.controller_port,
                        str(self.data_dir),
                        self.kafka_version,
                        node.node_id,
                        cluster_ports,
                    )
                )
            except BaseException:
                _kill_unrecorded(process)
                raise
        return process

    def cluster_id(self) -> str | None:
        """The id of the cluster this node's storage was formatted for (None: not formatted)."""
        try:
            lines = (self.data_dir / "log" / "meta.properties").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id":
                return value.strip()
        return None

    def _check_storage_version(self) -> None:
        """Refuse a data dir another release formatted, before Kafka fails on it obscurely."""
        try:
            formatted_by = (self.data_dir / _VERSION_FILE).read_text().strip()
        except OSError:
            return  # a new dir, or one formatted before the version was recorded
        if formatted_by and formatted_by != self.kafka_version:
            raise BrokerError(
                f"{self.data_dir} holds the storage of Kafka {formatted_by}, not "
                f"{self.kafka_version}: start it with --kafka-version {formatted_by}, "
                "or choose another --dir"
            )

    def _format_storage(self, jvm: list[str], config: Path, cluster_id: str) -> None:
        result = subprocess.run(
            [
                *jvm,
                "kafka.tools.StorageTool",
                "format",
                # One token: a base64 id may start with '-', which argparse takes for an option.
                f"--cluster-id={cluster_id}",
                "-c",
                str(config),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
            raise BrokerError(
                f"formatting Kafka storage in {self.data_dir} failed: " + " | ".join(tail)
            )
        (self.data_dir / _VERSION_FILE).write_text(self.kafka_version + "\n")

    def wait_ready(self, process: subprocess.Popen[bytes], brokers: int = 1) -> None:
        """Wait until the broker answers metadata naming ``brokers`` live brokers; a broker
        that exits, or does not answer within the timeout, is an error (and is stopped)."""
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise BrokerError(
                    f"Kafka exited with status {process.returncode} while starting: "
                    f"see {self.log_file} and {self.data_dir / 'broker.out'}"
                )
            if live_brokers(HOST, self.port) >= brokers:
                return
            time.sleep(0.25)
        terminate(process.pid)
        what = "metadata" if brokers == 1 else f"metadata naming {brokers} live brokers"
        raise BrokerError(
            f"Kafka did not answer {what} on {self.bootstrap} within {self.ready_timeout:.0f} s: "
            f"see {self.log_file}; a slow machine may need a longer --timeout"
        )

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the broker started on this port; False when none of ours was running."""
        state = broker_status(self.port)
        if state is None:
            forget_broker(self.port)
            return False
        terminate(state.pid, timeout)
        forget_broker(self.port)
        return True


__all__ = [
    "DEFAULT_PORT",
    "BrokerError",
    "BrokerState",
    "LocalKafka",
    "broker_status",
    "cluster_refusal",
    "forget_broker",
    "new_cluster_id",
    "pid_alive",
    "recorded_broker",
    "terminate",
    "terminate_all",
]
