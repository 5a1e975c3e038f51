"""Resolve the pinned Apache Kafka release's jars through Maven Central with ``mvn``.

Kafka 3.9.1 is the pin: the last 3.x release, KRaft without ZooKeeper, and it still accepts
the older request versions aiokafka 0.14 sends (Kafka 4.0 removed several of them, KIP-896).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

KAFKA_VERSION = "3.9.1"
SCALA_VERSION = "2.13"
# Kafka 3.9 logs through slf4j 1.7 + reload4j, as its own distribution does.
_EXTRA_ARTIFACTS = (("org.slf4j", "slf4j-reload4j", "1.7.36"),)
_COMPLETE_MARKER = ".complete"


class KafkaJarsError(RuntimeError):
    """The Kafka jars could not be had (no mvn and nothing cached, or the resolve failed)."""


def cache_root() -> Path:
    """Where streamapp caches downloads and local broker state (``STREAMAPP_CACHE`` overrides)."""
    override = os.environ.get("STREAMAPP_CACHE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "streamapp"


def jars_dir() -> Path:
    return cache_root() / f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}" / "libs"


def _pom() -> str:
    deps = [("org.apache.kafka", f"kafka_{SCALA_VERSION}", KAFKA_VERSION), *_EXTRA_ARTIFACTS]
    dep_xml = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>"
        for g, a, v in deps
    )
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>streamapp.local</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dep_xml}
  </dependencies>
</project>
"""


def resolve_kafka_jars(*, quiet: bool = False) -> Path:
    """Return the directory holding the pinned Kafka release's jars, resolving them if needed."""
    target = jars_dir()
    if (target / _COMPLETE_MARKER).exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaJarsError(
            f"no `mvn` on PATH and Kafka {KAFKA_VERSION} is not cached in {target}: "
            "install Maven (e.g. `apt-get install maven`) and retry"
        )
    if not quiet:
        print(
            f"streamapp: resolving Kafka {KAFKA_VERSION} jars through Maven Central "
            f"into {target} (first run only)...",
            file=sys.stderr,
            flush=True,
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Resolve into a scratch dir and rename, so an interrupted download never looks complete.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".resolve-") as scratch:
        scratch_path = Path(scratch)
        (scratch_path / "pom.xml").write_text(_pom())
        out_dir = scratch_path / "libs"
        result = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(scratch_path / "pom.xml"),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={out_dir}",
                "-DincludeScope=runtime",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 or not any(out_dir.glob("kafka_*.jar")):
            tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
            raise KafkaJarsError(
                f"mvn could not resolve Kafka {KAFKA_VERSION} (exit {result.returncode}): "
                + " | ".join(tail)
            )
        (out_dir / _COMPLETE_MARKER).write_text(KAFKA_VERSION + "\n")
        if target.exists():
            shutil.rmtree(target)
        out_dir.rename(target)
    return target
