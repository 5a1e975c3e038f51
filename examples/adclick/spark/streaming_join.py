"""The same impression/click join in Spark Structured Streaming: the benchmark's peer.

Shaped like Spark's own stream-stream join example: both sides watermarked on
event time, joined on the key with a time-range condition, so Spark can drop
state older than the window. Output goes to a Kafka topic in the same JSON as
streamapp's, so both are measured by the same reader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from examples.adclick.spark import frames

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


def _stream(spark: SparkSession, bootstrap: str, topic: str, starting: dict[int, int]) -> DataFrame:
    offsets = json.dumps({topic: {str(p): o for p, o in starting.items()}}) if starting else None
    return (
        spark.readStream.format("kafka")
        .options(**frames.kafka_options(bootstrap, topic))
        .option("startingOffsets", offsets or "earliest")
        .option("failOnDataLoss", "false")
        .load()
    )


def _event_time(column: str) -> Column:
    return (F.col(column) / F.lit(1000)).cast("timestamp")


def attribution_stream(
    spark: SparkSession,
    bootstrap: str,
    topics: dict[str, str],
    window_ms: int,
    grace_ms: int,
    starting: dict[str, dict[int, int]] | None = None,
) -> DataFrame:
    starting = starting or {}
    impressions = (
        frames.impressions(
            _stream(spark, bootstrap, topics["impressions"], starting.get("impressions", {}))
        )
        .where("valid")
        .select(
            F.col("auction_id").alias("imp_auction_id"),
            "campaign",
            "cost_micros",
            F.col("event_time_ms").alias("impression_time_ms"),
            _event_time("event_time_ms").alias("impression_time"),
        )
        # An impression can be matched until its window and the disorder bound have passed.
        .withWatermark("impression_time", f"{window_ms + grace_ms} milliseconds")
    )
    clicks = (
        frames.clicks(_stream(spark, bootstrap, topics["clicks"], starting.get("clicks", {})))
        .where("valid")
        .select(
            "click_id",
            F.col("auction_id").alias("click_auction_id"),
            F.col("event_time_ms").alias("click_time_ms"),
            _event_time("event_time_ms").alias("click_time"),
        )
        .withWatermark("click_time", f"{grace_ms} milliseconds")
    )
    joined = impressions.join(
        clicks,
        F.expr(
            "click_auction_id = imp_auction_id AND "
            "click_time >= impression_time AND "
            f"click_time <= impression_time + interval {window_ms} milliseconds"
        ),
    )
    return joined.select(
        F.col("click_auction_id").alias("key"),
        F.to_json(
            F.struct(
                "campaign",
                F.col("click_auction_id").alias("auction_id"),
                "click_id",
                "click_time_ms",
                "cost_micros",
                "impression_time_ms",
            )
        ).alias("value"),
    )


def start_join(
    spark: SparkSession,
    bootstrap: str,
    topics: dict[str, str],
    output_topic: str,
    checkpoint: Path,
    window_ms: int,
    grace_ms: int,
    starting: dict[str, dict[int, int]] | None = None,
) -> StreamingQuery:
    """Start the streaming join writing to ``output_topic``; stop it with ``query.stop()``."""
    return (
        attribution_stream(spark, bootstrap, topics, window_ms, grace_ms, starting)
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", output_topic)
        .option("checkpointLocation", str(checkpoint))
        .outputMode("append")
        .queryName("adclick-join")
        .start()
    )
