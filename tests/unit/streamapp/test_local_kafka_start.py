"""`LocalKafka.start` leaves no broker running that nothing recorded.

The broker runs in its own session and outlives its starter; ``stop`` and ``status`` find it
only by the pid ``start`` records. Here the "JVM" is a real child process that is not Kafka (a
shell that sleeps), started exactly as the broker is; what fails is the recording.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamapp.kafka import broker as broker_module
from streamapp.kafka.broker import LocalKafka, broker_status
from streamapp.kafka.probe import free_port


@pytest.fixture
def started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every process `start` launches; any still running at the end is killed."""
    monkeypatch.setenv("STREAMAPP_CACHE", str(tmp_path / "cache"))
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\nexec sleep 600\n")
    java.chmod(0o755)
    monkeypatch.setattr(broker_module, "_java", lambda: str(java))
    monkeypatch.setattr(broker_module, "resolve_kafka_jars", lambda _release: tmp_path / "libs")
    processes: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        process: subprocess.Popen[bytes] = real_popen(*args, **kwargs)
        processes.append(process)
        return process

    monkeypatch.setattr(broker_module.subprocess, "Popen", popen)
    yield processes
    for process in processes:
        if process.poll() is None:  # the orphan a failing run left: not for the next test
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def _formatted_data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "log").mkdir(parents=True)
    (data / "log" / "meta.properties").touch()  # storage formatted: no StorageTool run
    return data


@pytest.mark.parametrize(
    "failure",
    [KeyboardInterrupt(), OSError(28, "No space left on device")],
    ids=["interrupted", "write-failed"],
)
def test_a_broker_whose_state_is_not_written_is_killed_not_orphaned(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    started: list[subprocess.Popen[bytes]],
    failure: BaseException,
) -> None:
    def write_state(_state: broker_module.BrokerState) -> None:
        raise failure

    monkeypatch.setattr(broker_module, "_write_state", write_state)
    port = free_port(broker_module.HOST)
    kafka = LocalKafka(port=port, data_dir=_formatted_data_dir(tmp_path), kafka_version="4.4.0")
    with pytest.raises(type(failure)):
        kafka.start()
    (process,) = started
    assert process.poll() is not None  # killed and reaped, not left running
    assert process.returncode == -signal.SIGKILL
    assert broker_status(port) is None


def test_a_broker_whose_state_is_written_is_left_running_and_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: list[subprocess.Popen[bytes]]
) -> None:
    """The other side: once recorded, the broker outlives a start that fails later."""

    def never_ready(self: LocalKafka, _process: subprocess.Popen[bytes]) -> None:
        raise KeyboardInterrupt  # Ctrl-C while waiting for the broker to answer

    monkeypatch.setattr(LocalKafka, "wait_ready", never_ready)
    port = free_port(broker_module.HOST)
    data = _formatted_data_dir(tmp_path)
    kafka = LocalKafka(port=port, data_dir=data, kafka_version="4.4.0")
    with pytest.raises(KeyboardInterrupt):
        kafka.start()
    (process,) = started
    assert process.poll() is None
    recorded = broker_module._read_state(port)
    assert recorded is not None and recorded.pid == process.pid
    assert (data / "broker.json").exists()
