"""Which Kafka release the local broker runs, and what each release is given (no JVM here)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from streamapp.kafka import broker as broker_module
from streamapp.kafka.broker import BrokerError, LocalKafka, _read_state
from streamapp.kafka.config import log4j2_properties
from streamapp.kafka.release import (
    DEFAULT_KAFKA_VERSION,
    KAFKA_VERSION_ENV,
    TESTED_KAFKA_VERSIONS,
    KafkaVersionError,
    _pom,
    jars_dir,
    kafka_release,
)
from tests.paths import REPO_ROOT


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMAPP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(KAFKA_VERSION_ENV, raising=False)


def test_the_default_is_4x_and_the_variable_then_the_option_override_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert DEFAULT_KAFKA_VERSION.startswith("4.")
    assert kafka_release().version == DEFAULT_KAFKA_VERSION
    monkeypatch.setenv(KAFKA_VERSION_ENV, "3.9.1")
    assert kafka_release().version == "3.9.1"
    assert kafka_release("4.1.0").version == "4.1.0"


@pytest.mark.parametrize(
    ("version", "says"),
    [
        ("4", "is not a Kafka release number"),
        ("latest", "is not a Kafka release number"),
        ("2.8.2", "runs Kafka 3.3 to 4.x"),
        ("3.2.3", "runs Kafka 3.3 to 4.x"),
        ("5.0.0", "runs Kafka 3.3 to 4.x"),
    ],
)
def test_a_release_it_cannot_run_is_refused_by_name(version: str, says: str) -> None:
    with pytest.raises(KafkaVersionError, match=says) as refused:
        kafka_release(version)
    assert "--kafka-version" in str(refused.value)


def test_the_variable_is_named_when_its_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KAFKA_VERSION_ENV, "4.x")
    with pytest.raises(BrokerError, match=f"{KAFKA_VERSION_ENV}='4.x'"):
        LocalKafka(port=1)


def test_each_release_gets_the_logging_its_own_distribution_ships() -> None:
    # 4.x logs through log4j2 (KIP-653); 3.x through reload4j, a log4j 1 drop-in.
    four, three = kafka_release("4.4.0"), kafka_release("3.9.1")
    assert four.uses_log4j2 and not three.uses_log4j2
    assert "<artifactId>kafka_2.13</artifactId><version>4.4.0</version>" in _pom(four)
    assert "<artifactId>log4j-slf4j-impl</artifactId>" in _pom(four)
    assert "reload4j" not in _pom(four)
    assert "<artifactId>slf4j-reload4j</artifactId>" in _pom(three)
    assert "log4j-slf4j-impl" not in _pom(three)
    assert jars_dir(four) != jars_dir(three)


def test_the_log4j2_config_sends_everything_to_the_broker_log(tmp_path: Path) -> None:
    text = log4j2_properties(tmp_path / "broker.log")
    assert f"appender.file.fileName={tmp_path / 'broker.log'}" in text
    assert "rootLogger.appenderRef.file.ref=FILE" in text
    assert "logger.request.name=kafka.request.logger" in text


def test_default_data_dirs_are_per_release(monkeypatch: pytest.MonkeyPatch) -> None:
    # A release cannot start on storage a newer one formatted: they must not share a dir.
    assert LocalKafka(port=9092).data_dir != LocalKafka(port=9092, kafka_version="3.9.1").data_dir
    assert LocalKafka(port=9092).kafka_version == DEFAULT_KAFKA_VERSION


def test_storage_of_another_release_is_refused_before_java_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "kafka-version").write_text("4.4.0\n")

    def no_java() -> str:
        raise AssertionError("the refusal must come before the JVM is looked for")

    monkeypatch.setattr(broker_module, "_java", no_java)
    with pytest.raises(BrokerError) as err:
        LocalKafka(port=1, data_dir=data, kafka_version="3.9.1").start()
    assert "holds the storage of Kafka 4.4.0, not 3.9.1" in str(err.value)
    assert "--kafka-version 4.4.0" in str(err.value)


def test_a_registry_entry_without_a_version_was_written_by_the_3_9_1_pin(tmp_path: Path) -> None:
    entry = tmp_path / "cache" / "brokers" / "7.json"
    entry.parent.mkdir(parents=True)
    entry.write_text(
        json.dumps({"pid": 1, "port": 7, "controller_port": 8, "data_dir": str(tmp_path)})
    )
    state = _read_state(7)
    assert state is not None and state.kafka_version == "3.9.1"


def test_make_integration_runs_on_every_tested_release_default_first() -> None:
    # The Makefile cannot import the package before the venv exists, so it names them itself.
    makefile = (REPO_ROOT / "Makefile").read_text()
    match = re.search(r"^KAFKA_VERSIONS \?= (.+)$", makefile, re.MULTILINE)
    assert match is not None
    assert tuple(match[1].split()) == TESTED_KAFKA_VERSIONS
    assert TESTED_KAFKA_VERSIONS[0] == DEFAULT_KAFKA_VERSION
