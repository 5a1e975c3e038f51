"""`LocalKafkaCluster` and `streamapp kafka --brokers N` without a JVM.

Each node's "JVM" is a real child process that is not Kafka (a Python that sleeps, started
exactly as a node is, its command line naming ``kafka.Kafka`` and the node's config as a
broker's does); its storage is marked formatted, and a node is ready as soon as it is started.
What is real: the config each node is given, the records, the pids signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamapp.cli import main
from streamapp.kafka import broker as broker_module
from streamapp.kafka.broker import BrokerError, LocalKafka, broker_status, recorded_broker
from streamapp.kafka.cluster import LocalKafkaCluster, brokers_refusal
from streamapp.kafka.probe import free_port


@pytest.fixture
def jvms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every process a node's start launches; any still running at the end is killed."""
    monkeypatch.setenv("STREAMAPP_CACHE", str(tmp_path / "cache"))
    java = tmp_path / "java"
    # A Python script, not a shell that execs one: its command line is a broker's from the start.
    java.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(600)\n")
    java.chmod(0o755)
    monkeypatch.setattr(broker_module, "_java", lambda: str(java))
    monkeypatch.setattr(broker_module, "resolve_kafka_jars", lambda _release: tmp_path / "libs")
    real_launch = LocalKafka.launch

    def launch(self: LocalKafka, *args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        (self.data_dir / "log").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "log" / "meta.properties").write_text("cluster.id=c1\n")
        return real_launch(self, *args, **kwargs)

    def ready(self: LocalKafka, process: subprocess.Popen[bytes], brokers: int = 1) -> None:
        assert brokers == 3  # each node waits until it names every node
        # A real node answers only once its JVM runs. Right after exec the kernel may not have
        # set the new command line yet (a vfork parent resumes before it is), so a status read
        # at once could find the pid without its broker's command line.
        deadline = time.monotonic() + 10.0
        while b"kafka.Kafka" not in Path(f"/proc/{process.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the node's process never showed its command"
            time.sleep(0.01)
        assert process.poll() is None

    monkeypatch.setattr(LocalKafka, "launch", launch)
    monkeypatch.setattr(LocalKafka, "wait_ready", ready)
    processes: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        process: subprocess.Popen[bytes] = real_popen(*args, **kwargs)
        processes.append(process)
        return process

    monkeypatch.setattr(broker_module.subprocess, "Popen", popen)
    yield processes
    for process in processes:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def _settings(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def _cluster(tmp_path: Path) -> LocalKafkaCluster:
    return LocalKafkaCluster(3, ports=[free_port() for _ in range(3)], data_dir=tmp_path / "c")


@pytest.mark.parametrize("brokers", [0, -1, 2, 6])
def test_a_cluster_is_3_to_5_brokers(brokers: int) -> None:
    refusal = brokers_refusal(brokers)
    assert refusal is not None and refusal.startswith(f"--brokers {brokers}: ")
    with pytest.raises(BrokerError):
        LocalKafkaCluster(brokers)


def test_1_and_3_to_5_brokers_are_accepted() -> None:
    assert [brokers_refusal(n) for n in (1, 3, 4, 5)] == [None] * 4


def test_nodes_take_consecutive_ports_and_a_dir_each(tmp_path: Path) -> None:
    cluster = LocalKafkaCluster(3, port=9092, data_dir=tmp_path)
    assert cluster.ports == (9092, 9093, 9094)
    assert cluster.bootstrap == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    assert [kafka.data_dir for kafka in cluster.nodes.values()] == [
        tmp_path / f"node-{i}" for i in (1, 2, 3)
    ]
    # The default dir is per size: storage is formatted for its quorum.
    assert LocalKafkaCluster(3).data_dir != LocalKafkaCluster(5).data_dir


def test_every_node_votes_in_the_same_quorum_and_is_found_from_any_port(
    tmp_path: Path, jvms: list[subprocess.Popen[bytes]]
) -> None:
    cluster = _cluster(tmp_path)
    try:
        assert cluster.start() == cluster.bootstrap
        assert len(jvms) == 3
        configs = {i: _settings(k.data_dir / "server.properties") for i, k in cluster.nodes.items()}
        assert {c["node.id"] for c in configs.values()} == {"1", "2", "3"}
        [voters] = {c["controller.quorum.voters"] for c in configs.values()}
        controller_ports = [int(v.rsplit(":", 1)[1]) for v in voters.split(",")]
        assert len(set(controller_ports) | set(cluster.ports)) == 6  # all distinct
        for node_id, state in cluster.status().items():
            assert state is not None
            assert (state.node_id, state.cluster_ports) == (node_id, cluster.ports)
        found = LocalKafkaCluster.found(cluster.ports[1])
        assert found is not None and found.bootstrap == cluster.bootstrap
        assert found.data_dir == cluster.data_dir
        # A second start finds them all running.
        assert cluster.start() == cluster.bootstrap and len(jvms) == 3
    finally:
        assert cluster.stop()
    assert all(process.poll() is not None for process in jvms)
    assert [recorded_broker(port) for port in cluster.ports] == [None] * 3


def test_a_killed_node_restarts_in_its_place_in_the_quorum(
    tmp_path: Path, jvms: list[subprocess.Popen[bytes]]
) -> None:
    cluster = _cluster(tmp_path)
    try:
        cluster.start()
        before = _settings(cluster.nodes[2].data_dir / "server.properties")
        victim = jvms[1]
        cluster.kill(2)
        assert victim.returncode == -signal.SIGKILL
        assert cluster.status()[2] is None
        assert cluster.status()[1] is not None and cluster.status()[3] is not None
        with pytest.raises(BrokerError, match=r"node 2 of the cluster .* does not run"):
            cluster.kill(2)
        cluster.restart(2)
        assert len(jvms) == 4 and jvms[3].poll() is None
        # The same controller port: the running nodes' quorum names it.
        assert _settings(cluster.nodes[2].data_dir / "server.properties") == before
        cluster.restart(2)  # running: left as it is
        assert len(jvms) == 4
    finally:
        cluster.stop()


def test_a_single_broker_on_a_node_s_port_is_refused_in_one_line(
    tmp_path: Path, jvms: list[subprocess.Popen[bytes]]
) -> None:
    single = LocalKafka(port=free_port(), data_dir=tmp_path / "single")
    single.wait_ready = lambda process, brokers=1: None  # type: ignore[method-assign]
    single.start()
    try:
        ports = [single.port, free_port(), free_port()]
        cluster = LocalKafkaCluster(3, ports=ports, data_dir=tmp_path / "c")
        with pytest.raises(BrokerError) as refused:
            cluster.start()
        assert str(refused.value).startswith(
            f"port {single.port} runs a single broker started by streamapp, not node 1 of a "
            "cluster: stop it first"
        )
        assert len(jvms) == 1  # nothing else started
    finally:
        single.stop()


def test_nodes_of_a_cluster_that_does_not_come_up_are_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jvms: list[subprocess.Popen[bytes]]
) -> None:
    def never(self: LocalKafka, process: subprocess.Popen[bytes], brokers: int = 1) -> None:
        if self.data_dir.name == "node-2":
            raise BrokerError("Kafka did not answer")

    monkeypatch.setattr(LocalKafka, "wait_ready", never)
    cluster = _cluster(tmp_path)
    with pytest.raises(BrokerError):
        cluster.start()
    assert len(jvms) == 3 and all(process.poll() is not None for process in jvms)
    assert [recorded_broker(port) for port in cluster.ports] == [None] * 3


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], list[str]]:
    status = main(["kafka", *args])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


@pytest.mark.parametrize("brokers", ["0", "2"])
def test_the_command_refuses_a_bad_size_in_one_line(
    capsys: pytest.CaptureFixture[str], brokers: str
) -> None:
    status, out, err = _cli(capsys, "start", "--brokers", brokers)
    assert (status, out) == (1, [])
    assert err == [f"streamapp kafka start: {brokers_refusal(int(brokers))}"]


def test_the_command_starts_inspects_and_stops_a_cluster_one_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], jvms: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    where = ["--port", str(port), "--dir", str(tmp_path / "c")]
    cluster = LocalKafkaCluster(3, port=port, data_dir=tmp_path / "c")
    status, out, err = _cli(capsys, "start", "--brokers", "3", *where)
    try:
        assert status == 0 and out == [cluster.bootstrap]
        assert err == [
            f"streamapp: starting a cluster of 3 Kafka {cluster.kafka_version} brokers on "
            f"ports {port}, {port + 1}, {port + 2} (data in {tmp_path / 'c'})",
            f"streamapp: Kafka cluster ready on {cluster.bootstrap} (their logs: "
            f"{tmp_path / 'c' / 'node-*' / 'broker.log'})",
        ]
        status, out, err = _cli(capsys, "start", "--brokers", "3", *where)
        assert (status, out, len(err)) == (0, [cluster.bootstrap], 1)
        assert err[0].startswith("streamapp: a cluster of 3 Kafka ")
        assert " already runs on " in err[0]
        # A single broker is not started where a cluster runs.
        node_1 = cluster.status()[1]
        assert node_1 is not None
        status, out, err = _cli(capsys, "start", *where)
        assert (status, out) == (1, [])
        assert err == [f"streamapp kafka start: {broker_module.cluster_refusal(node_1)}"]
        cluster.kill(3)
        status, out, _ = _cli(capsys, "status", "--port", str(port + 1))
        assert status == 3 and len(out) == 3
        assert out[0].startswith(f"running: 127.0.0.1:{port} (node 1 of 3, Kafka ")
        assert out[2].startswith(f"not running: 127.0.0.1:{port + 2} (node 3 of 3, data in ")
        status, out, err = _cli(capsys, "start", "--brokers", "3", *where)
        assert status == 0 and err[0].startswith("streamapp: starting node 3 of a cluster of 3")
        status, out, _ = _cli(capsys, "status", "--port", str(port))
        assert status == 0 and all(line.startswith("running: ") for line in out)
    finally:
        status, out, _ = _cli(capsys, "stop", "--port", str(port + 2))
    assert (status, out) == (0, [f"stopped the cluster of 3 brokers on {cluster.bootstrap}"])
    assert [broker_status(p) for p in cluster.ports] == [None] * 3
    status, out, _ = _cli(capsys, "status", "--port", str(port))
    assert status == 3 and out == [f"not running: no broker started by streamapp on port {port}"]
