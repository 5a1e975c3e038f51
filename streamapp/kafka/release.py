"""Resolve an Apache Kafka release's jars through Maven Central with ``mvn``.

Kafka 4.4.0 is the default: new clusters are 4.x, so that is what development, the tests and
the demo run against. aiokafka 0.14 negotiates request versions through ApiVersions and sends
none of those Kafka 4.0 removed (KIP-896), which the integration suite checks on a real 4.x
broker. 3.9.1 (the last 3.x release) is kept selectable, and CI runs the broker- and
protocol-sensitive integration modules on it too, for the clusters that still run 3.x.

The version is chosen by ``--kafka-version`` (``streamapp kafka fetch/start``, ``streamapp
demo``), else by ``STREAMAPP_KAFKA_VERSION``, else the default.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_KAFKA_VERSION = "4.4.0"
#: The releases `make integration` runs on: the whole suite on the first (the default), the
#: broker- and protocol-sensitive modules on the others.
TESTED_KAFKA_VERSIONS = ("4.4.0", "3.9.1")
KAFKA_VERSION_ENV = "STREAMAPP_KAFKA_VERSION"
SCALA_VERSION = "2.13"
_COMPLETE_MARKER = ".complete"
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


class KafkaJarsError(RuntimeError):
    """The Kafka jars could not be had (no mvn and nothing cached, or the resolve failed)."""


class KafkaVersionError(ValueError):
    """A Kafka version streamapp cannot run as its local broker."""


@dataclass(frozen=True)
class KafkaRelease:
    """One Kafka release as the local broker runs it: its jars and how it is told to log."""

    version: str

    @property
    def major(self) -> int:
        return int(self.version.split(".", 1)[0])

    @property
    def uses_log4j2(self) -> bool:
        # Kafka 4.0 moved the broker from log4j 1 (reload4j) to log4j2 (KIP-653): its
        # distribution ships log4j-slf4j-impl and a log4j2 config, and ignores log4j.properties.
        return self.major >= 4

    @property
    def logging_artifacts(self) -> tuple[tuple[str, str, str], ...]:
        """The slf4j binding the release's own distribution ships (kafka_2.13's pom has none)."""
        if self.uses_log4j2:
            return (("org.apache.logging.log4j", "log4j-slf4j-impl", "2.25.5"),)
        return (("org.slf4j", "slf4j-reload4j", "1.7.36"),)

    @property
    def tested(self) -> bool:
        return self.version in TESTED_KAFKA_VERSIONS


def kafka_release(version: str | None = None) -> KafkaRelease:
    """The release to run: ``version`` if given, else ``$STREAMAPP_KAFKA_VERSION``, else 4.4.0.

    Any 3.x from 3.3 (the first with production-ready KRaft, which is all the local broker
    runs) or 4.x is accepted; only `TESTED_KAFKA_VERSIONS` are tested.
    """
    chosen = version or os.environ.get(KAFKA_VERSION_ENV) or DEFAULT_KAFKA_VERSION
    match = _VERSION.fullmatch(chosen.strip())
    source = "--kafka-version" if version else KAFKA_VERSION_ENV
    if match is None:
        raise KafkaVersionError(
            f"{source}={chosen!r} is not a Kafka release number such as "
            f"{DEFAULT_KAFKA_VERSION} or 3.9.1"
        )
    major, minor = int(match[1]), int(match[2])
    if not (major == 4 or (major == 3 and minor >= 3)):
        raise KafkaVersionError(
            f"{source}={chosen}: the local broker runs Kafka 3.3 to 4.x (KRaft, no ZooKeeper); "
            f"tested: {', '.join(TESTED_KAFKA_VERSIONS)}"
        )
    return KafkaRelease(chosen.strip())


def cache_root() -> Path:
    """Where streamapp caches downloads and local broker state (``STREAMAPP_CACHE`` overrides)."""
    override = os.environ.get("STREAMAPP_CACHE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "streamapp"


def jars_dir(release: KafkaRelease) -> Path:
    return cache_root() / f"kafka_{SCALA_VERSION}-{release.version}" / "libs"


def _pom(release: KafkaRelease) -> str:
    deps = [
        ("org.apache.kafka", f"kafka_{SCALA_VERSION}", release.version),
        *release.logging_artifacts,
    ]
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


def resolve_kafka_jars(release: KafkaRelease | None = None, *, quiet: bool = False) -> Path:
    """Return the directory holding the release's jars, resolving them if needed."""
    release = release or kafka_release()
    target = jars_dir(release)
    if (target / _COMPLETE_MARKER).exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaJarsError(
            f"no `mvn` on PATH and Kafka {release.version} is not cached in {target}: "
            "install Maven (e.g. `apt-get install maven`) and retry"
        )
    if not quiet:
        print(
            f"streamapp: resolving Kafka {release.version} jars through Maven Central "
            f"into {target} (first run only)...",
            file=sys.stderr,
            flush=True,
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Resolve into a scratch dir and rename, so an interrupted download never looks complete.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".resolve-") as scratch:
        scratch_path = Path(scratch)
        (scratch_path / "pom.xml").write_text(_pom(release))
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
                f"mvn could not resolve Kafka {release.version} (exit {result.returncode}): "
                + " | ".join(tail)
            )
        (out_dir / _COMPLETE_MARKER).write_text(release.version + "\n")
        if target.exists():
            shutil.rmtree(target)
        out_dir.rename(target)
    return target
