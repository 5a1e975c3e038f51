"""A lean local SparkSession with Spark's Kafka source, resolved from Maven Central.

The ``spark-sql-kafka-0-10`` package must match the installed pyspark exactly
(same Spark version, same Scala binary version); it is resolved once through
``spark.jars.packages`` into ``~/.cache/streamapp/ivy`` and reused from there.

Spark's JVM writes to the standard output and error it inherits: its Ivy resolution (about 80
lines on a first run, "proxy server not well configured" among them) and its log. Given a
``log_file``, `spark_session` starts the JVM with both pointing at that file instead.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

IVY_DIR = Path(os.environ.get("STREAMAPP_IVY_DIR", Path.home() / ".cache" / "streamapp" / "ivy"))


def scala_binary_version() -> str:
    """The Scala binary version the installed pyspark was built with (its jars say)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    for jar in sorted(jars.glob("scala-library-*.jar")):
        match = re.match(r"scala-library-(\d+\.\d+)\.", jar.name)
        if match:
            return match.group(1)
    # pyspark 3.5 wheels are built for 2.12, 4.x for 2.13.
    return "2.12" if pyspark.__version__.startswith("3.") else "2.13"


def kafka_package() -> str:
    import pyspark

    return f"org.apache.spark:spark-sql-kafka-0-10_{scala_binary_version()}:{pyspark.__version__}"


@contextlib.contextmanager
def output_to(log_file: Path | None) -> Iterator[None]:
    """File descriptors 1 and 2 on ``log_file`` (appended) meanwhile: what a process started
    here writes goes there, for as long as it runs. ``None`` changes nothing."""
    if log_file is None:
        yield
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with log_file.open("ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


def spark_session(
    app_name: str, *, driver_memory: str = "1g", log_file: Path | None = None
) -> SparkSession:
    """local[2], no UI, few shuffle partitions: small data, fast start, modest memory.

    With ``log_file``, Spark's JVM (if this call starts it) writes its output there.
    """
    # Loopback only, and no warning about the hostname resolving to it.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    IVY_DIR.mkdir(parents=True, exist_ok=True)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        # Short jobs on small data: quick compilation beats peak code quality.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.jars.packages", kafka_package())
        .config("spark.jars.ivy", str(IVY_DIR))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
    )
    with output_to(log_file):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
