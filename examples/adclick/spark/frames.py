"""Kafka topics as typed DataFrames, with the same decoding rules as examples.adclick.model.

A record Spark cannot parse, or whose fields break the model's rules, is kept
apart (``valid`` false) rather than dropped, so it can be counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

IMPRESSION_SCHEMA = StructType(
    [
        StructField("auction_id", StringType()),
        StructField("campaign", StringType()),
        StructField("cost_micros", LongType()),
        StructField("event_time_ms", LongType()),
    ]
)
CLICK_SCHEMA = StructType(
    [
        StructField("click_id", StringType()),
        StructField("auction_id", StringType()),
        StructField("event_time_ms", LongType()),
    ]
)
ATTRIBUTION_SCHEMA = StructType(
    [
        StructField("click_id", StringType()),
        StructField("auction_id", StringType()),
        StructField("campaign", StringType()),
        StructField("cost_micros", LongType()),
        StructField("impression_time_ms", LongType()),
        StructField("click_time_ms", LongType()),
    ]
)


def kafka_options(bootstrap: str, topic: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        # Only committed transactions: exactly-once output is read as consumers see it.
        "kafka.isolation.level": "read_committed",
    }


def read_topic(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """The whole topic as of now (batch)."""
    return (
        spark.read.format("kafka")
        .options(**kafka_options(bootstrap, topic))
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )


def _valid(fields: list[str], ints: list[str]) -> Column:
    cond = F.col("r").isNotNull()
    for name in fields:
        cond = cond & F.col(f"r.{name}").isNotNull() & (F.length(F.col(f"r.{name}")) > 0)
    for name in ints:
        cond = cond & (F.col(f"r.{name}") >= 0)
    return cond


def parse(raw: DataFrame, schema: StructType, ints: list[str]) -> DataFrame:
    """Kafka rows -> one column per field, plus the Kafka coordinates and a ``valid`` flag."""
    strings = [f.name for f in schema.fields if f.name not in ints]
    parsed = raw.select(
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp").alias("kafka_ts"),
        F.from_json(F.col("value").cast("string"), schema).alias("r"),
    )
    valid = _valid(strings, ints)
    if "auction_id" in strings:
        valid = valid & ~F.col("r.auction_id").startswith("~")
    return parsed.select(
        "topic",
        "partition",
        "offset",
        "kafka_ts",
        F.coalesce(valid, F.lit(False)).alias("valid"),
        *[F.col(f"r.{f.name}").alias(f.name) for f in schema.fields],
    )


def impressions(raw: DataFrame) -> DataFrame:
    return parse(raw, IMPRESSION_SCHEMA, ["cost_micros", "event_time_ms"])


def clicks(raw: DataFrame) -> DataFrame:
    return parse(raw, CLICK_SCHEMA, ["event_time_ms"])


def attributions(raw: DataFrame) -> DataFrame:
    return parse(raw, ATTRIBUTION_SCHEMA, ["cost_micros", "impression_time_ms", "click_time_ms"])
