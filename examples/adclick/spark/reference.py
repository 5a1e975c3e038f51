"""The reference join in batch, and its reconciliation against the streaming output.

Same rule as examples/adclick/attribution.py: a click is attributed to the first
impression of its auction when impression time <= click time <= impression
time + window. Each click id counts once, however often it was delivered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import Window
from pyspark.sql import functions as F

from examples.adclick.spark import frames

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ATTRIBUTION_FIELDS = [f.name for f in frames.ATTRIBUTION_SCHEMA.fields]
SAMPLE = 20  # how many examples of each discrepancy the report lists


@dataclass
class Reconciliation:
    impressions: int
    clicks: int
    undecodable: int
    expected: int  # attributions the reference join makes
    output_records: int  # records in the streaming output topic
    joined: int  # distinct click ids in the output that the reference also attributes
    missing: int  # reference attributions absent from the output
    duplicated: int  # extra copies in the output beyond the first of each click id
    mismatched: int  # click ids in both whose attribution fields differ
    unexpected: int  # click ids in the output the reference does not attribute
    campaigns: list[dict[str, Any]] = field(default_factory=list)
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.mismatched == 0 and self.unexpected == 0


def first_impressions(impressions: DataFrame) -> DataFrame:
    """One impression per auction: the first delivered (lowest partition offset)."""
    by_arrival = Window.partitionBy("auction_id").orderBy("partition", "offset")
    return (
        impressions.where("valid")
        .withColumn("n", F.row_number().over(by_arrival))
        .where("n = 1")
        .drop("n")
    )


def reference_join(impressions: DataFrame, clicks: DataFrame, window_ms: int) -> DataFrame:
    imps = first_impressions(impressions).select(
        "auction_id", "campaign", "cost_micros", F.col("event_time_ms").alias("impression_time_ms")
    )
    distinct_clicks = (
        clicks.where("valid")
        .dropDuplicates(["click_id"])
        .select("click_id", "auction_id", F.col("event_time_ms").alias("click_time_ms"))
    )
    return (
        distinct_clicks.join(imps, "auction_id")
        .where(
            (F.col("click_time_ms") >= F.col("impression_time_ms"))
            & (F.col("click_time_ms") <= F.col("impression_time_ms") + F.lit(window_ms))
        )
        .select(*ATTRIBUTION_FIELDS)
    )


def _rows(df: DataFrame, limit: int = SAMPLE) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in df.limit(limit).collect()]


def campaign_table(impressions: DataFrame, expected: DataFrame, output: DataFrame) -> DataFrame:
    """Per campaign: impressions, reference clicks/spend/CTR, streaming clicks/spend/CTR."""
    imps = first_impressions(impressions).groupBy("campaign").agg(F.count("*").alias("impressions"))
    ref = expected.groupBy("campaign").agg(
        F.count("*").alias("clicks"), F.sum("cost_micros").alias("spend_micros")
    )
    stream = (
        output.dropDuplicates(["click_id"])
        .groupBy("campaign")
        .agg(F.count("*").alias("stream_clicks"), F.sum("cost_micros").alias("stream_spend_micros"))
    )
    return (
        imps.join(ref, "campaign", "left")
        .join(stream, "campaign", "left")
        .fillna(0)
        .withColumn("ctr", F.col("clicks") / F.col("impressions"))
        .withColumn("stream_ctr", F.col("stream_clicks") / F.col("impressions"))
        .orderBy("campaign")
    )


def compare(expected: DataFrame, output: DataFrame) -> DataFrame:
    """One row per click id in either side: whether each has it, copies, and agreement."""
    versions = output.groupBy("click_id").agg(
        F.count("*").alias("copies"),
        # Copies that disagree among themselves are a mismatch as well.
        F.countDistinct(*ATTRIBUTION_FIELDS[1:]).alias("versions"),
        F.first(F.struct(*ATTRIBUTION_FIELDS[1:])).alias("o"),
    )
    e = expected.select("click_id", F.struct(*ATTRIBUTION_FIELDS[1:]).alias("e"))
    both = e.join(versions, "click_id", "full_outer")
    same = F.lit(True)
    for name in ATTRIBUTION_FIELDS[1:]:
        same = same & (F.col(f"e.{name}") == F.col(f"o.{name}"))
    in_ref = F.col("e").isNotNull()
    in_out = F.col("o").isNotNull()
    return both.select(
        "click_id",
        "e",
        "o",
        F.coalesce("copies", F.lit(0)).alias("copies"),
        F.when(in_ref & ~in_out, "missing")
        .when(~in_ref & in_out, "unexpected")
        .when(~same | (F.col("versions") > 1), "mismatched")
        .otherwise("joined")
        .alias("status"),
    )


def reconcile(
    spark: SparkSession, bootstrap: str, topics: dict[str, str], window_ms: int
) -> Reconciliation:
    """``topics``: the real names of "impressions", "clicks" and "attributed".

    Few Spark actions on purpose: each one re-plans and, uncached, re-reads Kafka.
    """
    impressions = frames.impressions(frames.read_topic(spark, bootstrap, topics["impressions"]))
    clicks = frames.clicks(frames.read_topic(spark, bootstrap, topics["clicks"]))
    output_all = frames.attributions(frames.read_topic(spark, bootstrap, topics["attributed"]))
    impressions.cache()
    clicks.cache()
    output_all.cache()
    output = output_all.where("valid").select(*ATTRIBUTION_FIELDS)
    expected = reference_join(impressions, clicks, window_ms).cache()
    comparison = compare(expected, output).cache()

    inputs = (
        impressions.select(F.lit("impression").alias("kind"), "valid")
        .unionByName(clicks.select(F.lit("click").alias("kind"), "valid"))
        .groupBy()
        .agg(
            F.sum(F.when(F.col("valid") & (F.col("kind") == "impression"), 1).otherwise(0)),
            F.sum(F.when(F.col("valid") & (F.col("kind") == "click"), 1).otherwise(0)),
            F.sum(F.when(~F.col("valid"), 1).otherwise(0)),
        )
        .collect()[0]
    )
    counts = {
        row["status"]: (row["n"], row["extra"])
        for row in comparison.groupBy("status")
        .agg(
            F.count("*").alias("n"),
            F.sum(F.greatest(F.col("copies") - 1, F.lit(0))).alias("extra"),
        )
        .collect()
    }
    problems = comparison.where("status != 'joined' or copies > 1")
    samples: dict[str, list[dict[str, Any]]] = {
        "missing": [],
        "duplicated": [],
        "mismatched": [],
        "unexpected": [],
    }
    for row in problems.limit(4 * SAMPLE * 10).collect():
        item = row.asDict(recursive=True)
        kind = item["status"] if item["status"] != "joined" else "duplicated"
        if len(samples[kind]) < SAMPLE:
            samples[kind].append(item)

    def n(status: str) -> int:
        return int(counts.get(status, (0, 0))[0])

    result = Reconciliation(
        impressions=int(inputs[0] or 0),
        clicks=int(inputs[1] or 0),
        undecodable=int(inputs[2] or 0),
        expected=n("joined") + n("missing") + n("mismatched"),
        output_records=output_all.count(),
        joined=n("joined"),
        missing=n("missing"),
        duplicated=sum(int(extra or 0) for _n, extra in counts.values()),
        mismatched=n("mismatched"),
        unexpected=n("unexpected"),
        campaigns=_rows(campaign_table(impressions, expected, output), limit=10_000),
        samples=samples,
    )
    for df in (impressions, clicks, output_all, expected, comparison):
        df.unpersist()
    return result
