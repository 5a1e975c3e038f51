"""The ad-click join as a `streamapp.App`: run it with

    streamapp worker -A examples.adclick.app:app --broker 127.0.0.1:9092 --web-port 6066

Impressions and clicks (co-partitioned by auction id) are joined per partition
through two changelog-backed tables; attributed clicks go to the output topic
and, repartitioned by campaign, into a per-campaign aggregate table. What to do
with each record is decided in `examples.adclick.join`; this module only reads
and writes tables and topics. Settings come from ``ADCLICK_*`` variables (see
`examples.adclick.topology`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import sys
from typing import Any

from faust.types import TP
from mode import BaseSignalT

from examples.adclick import join
from examples.adclick.kafka_io import create_topics, partition_counts
from examples.adclick.model import DecodeError, decode_attribution, decode_click, decode_impression
from examples.adclick.model import encode as encode_record
from examples.adclick.topology import CopartitionError, Topology, check_copartitioned
from streamapp import App
from streamapp.faust_compat import access as faust_compat_access

log = logging.getLogger(__name__)

topology = Topology.from_env()
window = join.JoinWindow(size_ms=topology.window_ms, grace_ms=topology.grace_ms)
buckets = join.ExpiryBuckets(width_ms=topology.expiry_bucket_ms)

app = App(
    topology.app_id,
    topic_partitions=topology.partitions,
    # Run on its own (`streamapp worker -A examples.adclick.app:app`), the demo app makes its
    # source topics as it declares them; the demo, its tests and the benchmark create them first.
    create_source_topics=True,
    processing_guarantee=topology.processing_guarantee,
    # Table keys and values (auction ids, JSON states, counts) on their changelogs.
    key_serializer="json",
    value_serializer="json",
    # A crashed worker's partitions move after 10 s instead of Faust's default 60 s.
    broker_session_timeout=10.0,
    broker_heartbeat_interval=2.0,
)

_raw: dict[str, Any] = {
    "key_type": bytes,
    "value_type": bytes,
    "key_serializer": "raw",
    "value_serializer": "raw",
}
sources = app.topic(topology.impressions, topology.clicks, partitions=topology.partitions, **_raw)
attributed_topic = app.topic(topology.attributed, partitions=topology.partitions, **_raw)
dead_letter_topic = app.topic(topology.dead_letters, partitions=1, **_raw)
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

# auction id -> ImpressionState JSON; plus this partition's expiry index entries.
impressions = app.Table("impressions", partitions=topology.partitions)
# auction id -> clicks that came before their impression; plus its expiry index.
pending_clicks = app.Table("pending-clicks", partitions=topology.partitions)
# "<outcome>/p<partition>" -> count of clicks (or records) with that outcome.
counters = app.Table("counters", partitions=topology.partitions, default=int)
# campaign -> {"impressions", "clicks", "spend_micros"}
campaign_stats = app.Table("campaign-stats", partitions=topology.campaign_partitions)

# The index keys share the tables with auction ids; model.RESERVED_KEY_PREFIX keeps them apart.
LIVE_BUCKETS = "~expiry/live"


def _bucket_key(bucket: int) -> str:
    return f"~expiry/{bucket}"


# Stream time per partition and side. Kept in memory: after a restart it starts
# over, which only postpones expiry (matching never depends on it).
_clocks: dict[int, join.PartitionClocks] = {}

# (table name, partition) -> the clock value at which the next sweep of that partition's
# index can find a bucket due, or None when no bucket is live. A sweep of a partition
# without an entry reads the index; afterwards the entry saves reading it on every
# record. Only this worker's agent changes an active partition's index, so the entry
# stays right until a rebalance, which forgets them all.
_sweep_at: dict[tuple[str, int], int | None] = {}


def _forget_sweeps(sender: Any, /, *args: Any, **kwargs: Any) -> None:
    _sweep_at.clear()


app.on_partitions_revoked.connect(_forget_sweeps)
app.on_partitions_assigned.connect(_forget_sweeps)


def _count(name: str, partition: int, n: int = 1) -> None:
    if n:
        counters[f"{name}/p{partition}"] += n


def _index(table: Any, partition: int, auction_id: str, bucket: int) -> None:
    key = _bucket_key(bucket)
    listed = table.get(key)
    if listed is None:
        live = buckets.with_bucket(table.get(LIVE_BUCKETS) or [], bucket)
        if live is not None:
            table[LIVE_BUCKETS] = live
    table[key] = [*(listed or []), auction_id]
    where = (table.name, partition)
    if where in _sweep_at:
        at = _sweep_at[where]
        due_at = buckets.due_at(bucket)
        _sweep_at[where] = due_at if at is None else min(at, due_at)


def _due(table: Any, partition: int, clock_ms: int) -> list[str]:
    """Auction ids listed in every bucket the clock has passed; those buckets are dropped."""
    where = (table.name, partition)
    if where in _sweep_at:
        at = _sweep_at[where]
        if at is None or clock_ms < at:
            return []
    live = table.get(LIVE_BUCKETS) or []
    due = buckets.due(live, clock_ms)
    ids: list[str] = []
    for bucket in due:
        key = _bucket_key(bucket)
        listed = table.get(key)
        if listed is not None:
            ids.extend(listed)
            del table[key]
    if due:
        live = live[len(due) :]
        table[LIVE_BUCKETS] = live
    _sweep_at[where] = buckets.next_due_ms(live)
    return ids


def _expire(partition: int, clocks: join.PartitionClocks) -> None:
    for auction_id in _due(impressions, partition, clocks.clicks_ms):
        stored = impressions.get(auction_id)
        if stored is None:
            continue
        state = join.ImpressionState.from_json(stored)
        if join.impression_expired(window, state, clocks.clicks_ms):
            del impressions[auction_id]
    for auction_id in _due(pending_clicks, partition, clocks.impressions_ms):
        stored = pending_clicks.get(auction_id)
        if stored is None:
            continue
        keep, gone = join.expire_pending(
            window, join.pending_from_json(stored), clocks.impressions_ms
        )
        _count(join.Outcome.UNMATCHED.value, partition, len(gone))
        if keep:
            pending_clicks[auction_id] = join.pending_to_json(keep)
        else:
            del pending_clicks[auction_id]


async def _send(
    source: Any,
    topic: Any,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    """Send within the transaction of the record being processed (with exactly_once).

    Faust picks a send's transaction by the *destination* partition, which only works
    for outputs partitioned like the input (changelogs). An output repartitioned by
    another key (campaign) or with another partition count (dead letters) belongs,
    as in Kafka Streams, to the transaction of the input task that produced it.
    """
    if not app.in_transaction:
        await topic.send(key=key, value=value, headers=headers)
        return
    transactional_id = faust_compat_access.transactional_id(app, TP(source.topic, source.partition))
    producer = app.consumer.transactions.producer
    await producer.send(
        topic.get_topic_name(), key, value, None, None, headers, transactional_id=transactional_id
    )


async def _emit(source: Any, attribution: Any) -> None:
    key = attribution.auction_id.encode()
    value = encode_record(attribution)
    await _send(source, attributed_topic, key, value)
    await _send(source, campaign_clicks_topic, attribution.campaign.encode(), value)


async def _dead_letter(message: Any, error: Exception) -> None:
    # The original bytes, untouched, with where they came from and why they were refused.
    headers = [
        ("source-topic", message.topic.encode()),
        ("source-partition", str(message.partition).encode()),
        ("source-offset", str(message.offset).encode()),
        ("error", str(error).encode()[:500]),
    ]
    await _send(message, dead_letter_topic, message.key, message.value, headers)
    _count("dead_letter", message.partition)
    log.warning(
        "adclick: undecodable record %s[%d]@%d sent to %s: %s",
        message.topic,
        message.partition,
        message.offset,
        topology.dead_letters,
        error,
    )


async def _on_impression(source: Any, impression: Any) -> None:
    partition = source.partition
    clocks = _clocks.setdefault(partition, join.PartitionClocks())
    clocks.saw_impression(impression)
    stored = impressions.get(impression.auction_id)
    state = join.ImpressionState.from_json(stored) if stored is not None else None
    pending = join.pending_from_json(pending_clicks.get(impression.auction_id))
    decision = join.on_impression(window, state, pending, impression)
    if decision.duplicate:
        _count(join.Outcome.DUPLICATE_IMPRESSION.value, partition)
        # A replay: attributions made the first time go out again (see join.ImpressionState).
        for attribution in decision.attributions:
            await _emit(source, attribution)
    else:
        bucket = buckets.bucket_of(window.impression_expires_after(impression))
        if not buckets.is_due(bucket, clocks.clicks_ms):
            impressions[impression.auction_id] = decision.impression_state.to_json()
            _index(impressions, partition, impression.auction_id, bucket)
        # else: the clicks clock is already past its bucket (clicks read ahead of impressions),
        # so the sweep at the end of this record would delete it again at once; it is
        # neither stored nor indexed, which leaves the table as that sweep would.
        if pending:
            del pending_clicks[impression.auction_id]
        for _click, outcome in decision.resolved:
            if outcome is not join.Outcome.JOINED:
                _count(outcome.value, partition)
        for attribution in decision.attributions:
            await _emit(source, attribution)
        await _send(
            source,
            campaign_impressions_topic,
            impression.campaign.encode(),
            encode_record(impression),
        )
    _expire(partition, clocks)


async def _on_click(source: Any, click: Any) -> None:
    partition = source.partition
    clocks = _clocks.setdefault(partition, join.PartitionClocks())
    clocks.saw_click(click)
    stored = impressions.get(click.auction_id)
    state = join.ImpressionState.from_json(stored) if stored is not None else None
    pending = join.pending_from_json(pending_clicks.get(click.auction_id)) if state is None else ()
    decision = join.on_click(window, state, pending, click)
    if decision.impression_state is not None:
        impressions[click.auction_id] = decision.impression_state.to_json()
    if decision.pending is not None:
        pending_clicks[click.auction_id] = join.pending_to_json(decision.pending)
        bucket = buckets.bucket_of(window.pending_click_expires_after(click))
        _index(pending_clicks, partition, click.auction_id, bucket)
    if decision.attribution is not None:
        await _emit(source, decision.attribution)
    if decision.outcome not in (join.Outcome.JOINED, join.Outcome.PENDING):
        _count(decision.outcome.value, partition)
    _expire(partition, clocks)


@app.agent(sources)
async def join_impressions_and_clicks(stream: Any) -> None:
    async for event in stream.events():
        message = event.message
        try:
            if message.topic == topology.impressions:
                record: Any = decode_impression(message.value)
            else:
                record = decode_click(message.value)
        except DecodeError as exc:
            await _dead_letter(message, exc)
            continue
        if message.topic == topology.impressions:
            await _on_impression(message, record)
        else:
            await _on_click(message, record)


@app.agent(campaign_sources)
async def aggregate_by_campaign(stream: Any) -> None:
    # Counts every record it reads. Under at_least_once a crash replays records on both sides of
    # the repartition (the join re-emits, this agent re-reads), so the aggregate may count some
    # twice; that is at-least-once, not a bug. Under exactly_once each record counts once.
    async for event in stream.events():
        message = event.message
        campaign = message.key.decode() if message.key else "?"
        stats = dict(campaign_stats.get(campaign) or {})
        if message.topic == topology.campaign_impressions:
            stats["impressions"] = stats.get("impressions", 0) + 1
        else:
            try:
                attribution = decode_attribution(message.value)
            except DecodeError as exc:
                await _dead_letter(message, exc)
                continue
            stats["clicks"] = stats.get("clicks", 0) + 1
            stats["spend_micros"] = stats.get("spend_micros", 0) + attribution.cost_micros
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
    # Topics this app writes are created with the counts the join needs; source topics
    # that exist already are taken as they are and checked together with the changelogs
    # of the tables that are partitioned like them.
    await create_topics(bootstrap, topology.topic_partitions())
    # The changelogs too, compacted as Faust makes them. Left to Faust, they appear only as the
    # worker starts, and one may be missing from the metadata the group leader plans with (aiokafka
    # refreshes it every consumer_metadata_max_age_ms, 5 min): that table is then left out of the
    # plan, and under exactly_once its writes have no transaction to go to.
    changelogs = topology.changelog_partitions()
    await create_topics(bootstrap, changelogs, configs={"cleanup.policy": "compact"})
    groups = topology.joined_groups
    groups[0] += [topology.changelog(t) for t in ("impressions", "pending-clicks", "counters")]
    groups[1] += [topology.changelog("campaign-stats")]
    existing = await partition_counts(bootstrap, {t for g in groups for t in g})
    check_copartitioned(groups, {**changelogs, **existing})


@app.on_worker_init.connect
def check_topics(sender: Any, /, *args: Any, signal: BaseSignalT[Any], **kwargs: Any) -> None:
    """Refuse to start on topics that cannot be joined partition by partition.

    Runs before the worker subscribes: subscribing to a missing topic would have the
    broker auto-create it with its default count. The check runs on its own event
    loop in a helper thread, leaving the worker's loop untouched.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        try:
            pool.submit(asyncio.run, _prepare_topics(_bootstrap())).result()
        except CopartitionError as exc:
            print(f"adclick: cannot start: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from exc


def table_json(raw: bytes) -> Any:
    """Decode a value as the tables store it (for readers of the changelog topics)."""
    return json.loads(raw)
