"""The ad-click demo as a `streamapp.App`: run it with

    streamapp worker -A examples.adclick.app:app --broker 127.0.0.1:9092 --web-port 6066

Clicks are joined with the impression of their auction by `streamapp.joins.WindowedJoin`
(a left join, clicks on the left, both topics keyed and co-partitioned by auction id); the
framework keeps both sides in changelog-backed tables, expires them by event time and checks
the co-partitioning at startup; it reads its sources in batches (``batch_records``). This module
keeps the business logic: which click is attributed (`examples.adclick.attribution`), what is
counted, and the per-campaign aggregate over the attributions and impressions repartitioned by
campaign, read in batches (`streamapp.batches`). Undecodable records go to the dead-letter topic
through the app's ``bad_record_policy``: the join and the aggregate hand theirs to it per record.
Settings come from ``ADCLICK_*`` variables (see `examples.adclick.topology`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Callable
from typing import Any

from faust.types import TopicT
from faust.types.codecs import CodecT
from mode import BaseSignalT

from examples.adclick import attribution as rule
from examples.adclick.kafka_io import create_topics
from examples.adclick.model import (
    DecodeError,
    decode_attribution,
    decode_click,
    decode_impression,
)
from examples.adclick.model import encode as encode_record
from examples.adclick.topology import JOIN_NAME, Topology
from streamapp import App
from streamapp.bad_records import handle_record_error
from streamapp.batches import batches
from streamapp.joins import JoinResult, Outcome, Side, Source, SourceRecord, WindowedJoin

topology = Topology.from_env()

app = App(
    topology.app_id,
    topic_partitions=topology.partitions,
    # Run on its own (`streamapp worker -A examples.adclick.app:app`), the demo app makes its
    # source topics as it declares them; the demo, its tests and the benchmark create them first.
    create_source_topics=True,
    processing_guarantee=topology.processing_guarantee,
    bad_record_policy="dead-letter",
    dead_letter_topic=topology.dead_letters,
    # Table keys and values (counter names, counts, campaign totals) on their changelogs.
    key_serializer="json",
    value_serializer="json",
    # A crashed worker's partitions move after 10 s instead of Faust's default 60 s.
    broker_session_timeout=10.0,
    # A partition that moves under the cooperative protocol waits between two rebalances: its
    # old owner gives it up in the first and rejoins at once, but the second starts only when
    # every other worker has heard of it, at its next heartbeat. In `bench/adclick.py`'s
    # scale-out that wait was 2.5 s at a 2 s heartbeat, 1.2 s at 0.5 s. Workers now heartbeat
    # every 0.1 s for 2 s after each cooperative join (streamapp.runtime.group.prompt_heartbeats);
    # the interval still matters when the old owner rejoins later than that.
    broker_heartbeat_interval=0.5,
    # A worker at most this many changelog records behind takes a task at once and replays the
    # rest first; one further behind warms up, and takes the task at a follow-up rebalance once
    # it has caught up. The default (10,000, Kafka Streams') is some 5 s of replay at this
    # app's restore pace on a busy 2-core machine, all of it a stop of the moved partition: in
    # `bench/adclick.py`'s scale-out the newcomer replayed 5,682 records in 5.9 s before its
    # first record. At 1,000 it warms up and replays nothing when the task moves.
    acceptable_recovery_lag=1_000,
)


class _ModelCodec(CodecT):
    """The model's wire format as a Faust codec: a topic's values decoded into its records."""

    def __init__(self, decode: Any = None, **kwargs: Any) -> None:
        self.decode = decode

    def loads(self, s: bytes) -> Any:
        return self.decode(s)  # raises DecodeError: the record goes to the dead letters

    def dumps(self, obj: Any) -> bytes:
        return encode_record(obj)

    def clone(self, *children: CodecT) -> CodecT:
        raise NotImplementedError("the demo's codecs are not chained")

    def __or__(self, other: Any) -> Any:
        raise NotImplementedError("the demo's codecs are not chained")


_raw: dict[str, Any] = {
    "key_type": bytes,
    "value_type": bytes,
    "key_serializer": "raw",
    "value_serializer": "raw",
}


def _auction_topic(name: str, decode: Callable[[bytes], Any]) -> TopicT:
    """A source topic keyed by auction id (UTF-8), its values decoded into the model's records
    by ``decode`` (or refused)."""
    return app.topic(
        name,
        partitions=topology.partitions,
        key_type=str,
        key_serializer="raw",
        value_serializer=_ModelCodec(decode),
    )


impressions_topic = _auction_topic(topology.impressions, decode_impression)
clicks_topic = _auction_topic(topology.clicks, decode_click)
attributed_topic = app.topic(topology.attributed, partitions=topology.partitions, **_raw)
campaign_sources = app.topic(
    topology.campaign_impressions,
    topology.campaign_clicks,
    partitions=topology.campaign_partitions,
    **_raw,
)
campaign_impressions_topic = app.topic(
    topology.campaign_impressions, partitions=topology.campaign_partitions, **_raw
)
campaign_clicks_topic = app.topic(
    topology.campaign_clicks, partitions=topology.campaign_partitions, **_raw
)

# "<outcome>/p<partition>" -> count of clicks (or records) with that outcome.
counters = app.Table("counters", partitions=topology.partitions, default=int)
# campaign -> {"impressions", "clicks", "spend_micros"}
campaign_stats = app.Table("campaign-stats", partitions=topology.campaign_partitions)


window = rule.AttributionWindow(size_ms=topology.window_ms, grace_ms=topology.grace_ms)


def _count(verdict: rule.Verdict, partition: int) -> None:
    counters[f"{verdict.value}/p{partition}"] += 1


async def _on_pair(result: JoinResult[Any, Any]) -> None:
    """A click with the impression of its auction (or, expired without one, alone)."""
    verdict = rule.judge(window, result.left, result.right)
    if verdict is not rule.Verdict.JOINED:
        _count(verdict, result.partition)
        return
    attributed = rule.attribute(result.right, result.left)
    value = encode_record(attributed)
    await attribution.send(
        result.message, attributed_topic, key=attributed.auction_id.encode(), value=value
    )
    await attribution.send(
        result.message, campaign_clicks_topic, key=attributed.campaign.encode(), value=value
    )


async def _on_record(record: SourceRecord) -> None:
    """Every click and impression once the join handled it: counted, or passed on."""
    counted = rule.counted(record.side, record.outcome)
    if counted is not None:
        _count(counted, record.partition)
    if record.side is Side.RIGHT and record.outcome in (Outcome.ACCEPTED, Outcome.REPLAY):
        # Each impression into its campaign's aggregate (again after a crash: at-least-once),
        # as it came: the aggregate counts it by its key and never reads the value, so it is
        # not encoded again.
        await attribution.send(
            record.message,
            campaign_impressions_topic,
            key=record.value.campaign.encode(),
            value=record.message.value,
        )


attribution = WindowedJoin(
    app,
    JOIN_NAME,
    # A click counts once per click id; an auction has one impression, the first one.
    left=Source(clicks_topic, time_ms=lambda click: click.event_time_ms, id=lambda c: c.click_id),
    right=Source(
        impressions_topic,
        time_ms=lambda impression: impression.event_time_ms,
        id=lambda impression: impression.auction_id,
    ),
    kind="left",
    window=window.join_window(),
    partitions=topology.partitions,
    output=_on_pair,
    on_record=_on_record,
    expiry_bucket_ms=topology.expiry_bucket_ms,
    # Over batches (docs/joins.md): the join's table writes, its changelog records and, under
    # at-least-once, its producer flushes go once per batch instead of once per record.
    batch_records=1000,
)


@app.agent(campaign_sources)
async def aggregate_by_campaign(stream: Any) -> None:
    # Counts every record it reads. Under at_least_once a crash replays records on both sides of
    # the repartition (the join re-emits, this agent re-reads), so the aggregate may count some
    # twice; that is at-least-once, not a bug. Under exactly_once each record counts once: a
    # batch's table writes and dead letters commit with its offsets.
    # Per batch rather than per record: the agent's work per record is small, and Faust's
    # per-record stream step would cost about as much (docs/batches.md).
    async for batch in batches(stream, max_records=1000):
        for event in batch:
            message = event.message
            campaign = message.key.decode() if message.key else "?"
            stats = dict(campaign_stats.get(campaign) or {})
            if message.topic == topology.campaign_impressions:
                stats["impressions"] = stats.get("impressions", 0) + 1
            else:
                try:
                    attributed = decode_attribution(message.value)
                except DecodeError as exc:
                    # A batch is not under bad_record_policy (a raising body stops the worker):
                    # the record goes to the dead letters here, and the batch goes on.
                    if not await handle_record_error(app, message, exc, aggregate_by_campaign.name):
                        raise
                    continue
                stats["clicks"] = stats.get("clicks", 0) + 1
                stats["spend_micros"] = stats.get("spend_micros", 0) + attributed.cost_micros
            campaign_stats[campaign] = stats


def campaign_view(stats: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """Per campaign: impressions, clicks, spend and click-through rate."""
    out: dict[str, dict[str, float]] = {}
    for campaign, s in sorted(stats.items()):
        imps, clicks = s.get("impressions", 0), s.get("clicks", 0)
        out[campaign] = {
            "impressions": imps,
            "clicks": clicks,
            "spend": s.get("spend_micros", 0) / 1e6,
            "ctr": clicks / imps if imps else 0.0,
        }
    return out


@app.page("/adclick/campaigns/")
async def get_campaigns(web: Any, request: Any) -> Any:
    # This worker's active campaign partitions only.
    return web.json(campaign_view({str(k): dict(v) for k, v in campaign_stats.items()}))


@app.page("/adclick/counters/")
async def get_counters(web: Any, request: Any) -> Any:
    return web.json({str(k): int(v) for k, v in counters.items()})


def _bootstrap() -> str:
    return ",".join(f"{url.host}:{url.port or 9092}" for url in app.conf.broker)


async def _prepare_topics(bootstrap: str) -> None:
    # The output topics, and the changelogs, compacted as Faust makes them. Left to Faust, those
    # appear only as the worker starts, and one may be missing from the metadata the group leader
    # plans with (aiokafka refreshes it every consumer_metadata_max_age_ms, 5 min): that table is
    # then left out of the plan, and under exactly_once its writes have no transaction to go to.
    # Topics that exist are left as they are: the worker's topic check refuses mismatched ones.
    await create_topics(bootstrap, topology.topic_partitions())
    await create_topics(
        bootstrap, topology.changelog_partitions(), configs={"cleanup.policy": "compact"}
    )


@app.on_worker_init.connect
def prepare_topics(sender: Any, /, *args: Any, signal: BaseSignalT[Any], **kwargs: Any) -> None:
    """Create the topics before the worker subscribes, on its own event loop in a helper
    thread, leaving the worker's loop untouched."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, _prepare_topics(_bootstrap())).result()


def table_json(raw: bytes) -> Any:
    """Decode a value as the tables store it (for readers of the changelog topics)."""
    return json.loads(raw)
