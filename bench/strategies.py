"""Benchmark: our classic strategies against their peers, at the sizes the KIPs talk about.

1. KIP-615's report: 2,100 consumers on 2,100 partitions, where the sticky
   assignor took minutes in Java before KIP-615 (aiokafka's port takes ~21 s).
   Our `StickyAssignor` and aiokafka's `StickyPartitionAssignor` each run a
   full leader `assign()` (member metadata in, member assignments out) on
   aiokafka's real `ClusterMetadata`: a fresh group, then one member leaving
   a settled group (previous ownership in every member's user data).
2. `cooperative-sticky` on 1,000,000 partitions (100 topics x 10,000) with
   2,000 equal members: the core on the plain problem, and the whole
   `assignor.plan` (validation, grouping, result building). Kafka's Java fast
   path takes ~1.4 s here (KAFKA-9987's benchmark); that figure is quoted,
   not measured, as no JVM peer runs in this process.

Our runs take the best of three (the least disturbed by other work on a
shared machine); the peers, which take seconds, run once. Run with `make
bench` or `.venv/bin/python bench/strategies.py`; prints progress while it
runs, then a table with ratios and the machine's load. Never part of the tests.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.sticky.sticky_assignor import (
    StickyPartitionAssignor,
)
from aiokafka.coordinator.protocol import (
    ConsumerProtocol,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.protocol.metadata import MetadataResponse_v0
from aiokafka.structs import TopicPartition

import assignor
from assignor.aiokafka_assignors import StickyAssignor
from assignor.strategies import Problem, Subscription
from assignor.strategies.sticky import assign_cooperative_sticky
from assignor.strategies.userdata import SubscriptionData, encode_subscription

T = TypeVar("T")


def aiokafka_sticky_metadata(
    topics: list[str], owned: list[TopicPartition] | None, generation: int = -1
) -> Any:
    """The subscription metadata aiokafka's StickyPartitionAssignor sends for a member owning
    ``owned``: its public ``metadata`` reads the assignor class's last assignment and
    generation, so a subclass holding those is asked."""

    class Member(StickyPartitionAssignor):
        pass

    Member.member_assignment = owned
    Member.generation = generation
    return Member.metadata(topics)


JAVA_FAST_PATH_SECONDS = 1.4
rows: list[tuple[str, str, float, str]] = []


def progress(message: str) -> None:
    print(f"  .. {message}", flush=True)


def timed(label: str, action: Callable[[], T], repeat: int = 1) -> tuple[T, float]:
    """Run `action` `repeat` times; the best time counts (the least disturbed by
    other work on a shared machine). Peers that take seconds run once."""
    best = float("inf")
    value: T | None = None
    for attempt in range(1, repeat + 1):
        suffix = f" (run {attempt}/{repeat})" if repeat > 1 else ""
        progress(f"{label}{suffix} ...")
        start = time.perf_counter()
        value = action()
        elapsed = time.perf_counter() - start
        progress(f"{label}{suffix}: {elapsed:.3f} s")
        best = min(best, elapsed)
    assert value is not None
    return value, best


def cluster_of(topics: dict[str, int]) -> ClusterMetadata:
    cluster = ClusterMetadata()
    response = MetadataResponse_v0(
        [(0, "localhost", 9092)],
        [(0, t, [(0, p, 0, [0], [0]) for p in range(n)]) for t, n in topics.items()],
    )
    cluster.update_metadata(response)
    return cluster


def wire(metadata: ConsumerProtocolMemberMetadata) -> Any:
    """What the leader really receives: the metadata after the wire."""
    return ConsumerProtocol.METADATA.decode(metadata.encode())


def owned_of(assignment: Any) -> dict[str, list[int]]:
    return {t: list(ps) for t, ps in assignment.assignment}


def kip615_sticky() -> None:
    print("== sticky: 2,100 members x 2,100 partitions (KIP-615's report)", flush=True)
    topics = {"t": 2100}
    cluster = cluster_of(topics)
    ids = [f"consumer-{i:04d}" for i in range(2100)]
    gone = ids[1000]

    fresh_ours = {m: wire(StickyAssignor().metadata(["t"])) for m in ids}
    fresh_theirs = {m: wire(aiokafka_sticky_metadata(["t"], None)) for m in ids}
    ours, ours_fresh = timed(
        "ours, fresh", lambda: StickyAssignor().assign(cluster, fresh_ours), repeat=3
    )
    theirs, theirs_fresh = timed(
        "aiokafka, fresh", lambda: StickyPartitionAssignor.assign(cluster, fresh_theirs)
    )
    rows.append(("sticky 2100x2100, fresh", "aiokafka StickyPartitionAssignor", theirs_fresh, ""))
    rows.append(("sticky 2100x2100, fresh", "ours (aiokafka adapter)", ours_fresh, ""))

    # Each side's own settled assignment, one member gone, ownership in user data.
    def ours_meta(m: str) -> Any:
        data = SubscriptionData(generation=0, owned=owned_of(ours[m]))
        return wire(ConsumerProtocolMemberMetadata(0, ["t"], encode_subscription(data)))

    def theirs_meta(m: str) -> Any:
        parts = [TopicPartition(t, p) for t, ps in theirs[m].assignment for p in ps]
        return wire(aiokafka_sticky_metadata(["t"], parts, 1))

    leave_ours = {m: ours_meta(m) for m in ids if m != gone}
    leave_theirs = {m: theirs_meta(m) for m in ids if m != gone}
    after, ours_leave = timed(
        "ours, one member leaves", lambda: StickyAssignor().assign(cluster, leave_ours), repeat=3
    )
    _, theirs_leave = timed(
        "aiokafka, one member leaves",
        lambda: StickyPartitionAssignor.assign(cluster, leave_theirs),
    )
    kept = sum(
        len(set(owned_of(ours[m]).get("t", [])) & set(owned_of(after[m]).get("t", [])))
        for m in leave_ours
    )
    progress(f"ours kept {kept} of 2099 surviving assignments")
    rows.append(
        ("sticky 2100x2100, one leaves", "aiokafka StickyPartitionAssignor", theirs_leave, "")
    )
    rows.append(("sticky 2100x2100, one leaves", "ours (aiokafka adapter)", ours_leave, ""))
    rows[-4] = (*rows[-4][:3], "1.0x")
    rows[-3] = (*rows[-3][:3], f"{theirs_fresh / ours_fresh:,.0f}x faster")
    rows[-2] = (*rows[-2][:3], "1.0x")
    rows[-1] = (*rows[-1][:3], f"{theirs_leave / ours_leave:,.0f}x faster")


def million_cooperative() -> None:
    print("== cooperative-sticky: 1,000,000 partitions (100 x 10,000), 2,000 members", flush=True)
    topics = {f"topic-{i:03d}": 10_000 for i in range(100)}
    subscription = sorted(topics)
    ids = [f"member-{i:04d}" for i in range(2000)]
    fresh = Problem(topics, {m: Subscription(frozenset(subscription)) for m in ids})
    outcome, core_fresh = timed("core, fresh", lambda: assign_cooperative_sticky(fresh), repeat=3)
    gone = ids[777]
    leave = Problem(
        topics,
        {
            m: Subscription(frozenset(subscription), 0, outcome.assignment[m])
            for m in ids
            if m != gone
        },
    )
    after, core_leave = timed(
        "core, one member leaves", lambda: assign_cooperative_sticky(leave), repeat=3
    )
    progress(
        f"moved {after.stats['moved_active']}, follow-up {after.followup_rebalance} "
        "(a leaver's partitions are free: nothing to withhold)"
    )
    # A member joining makes everyone give a little up: partitions are withheld.
    joined = Problem(
        topics,
        {
            **{m: Subscription(frozenset(subscription), 0, outcome.assignment[m]) for m in ids},
            "member-new": Subscription(frozenset(subscription)),
        },
    )
    join, core_join = timed(
        "core, one member joins", lambda: assign_cooperative_sticky(joined), repeat=3
    )
    withheld = sum(len(ps) for by in join.revoking.values() for ps in by.values())
    progress(f"withheld {withheld} partitions for the follow-up")

    scenario = {
        "topics": topics,
        "members": {
            m: {
                "subscription": subscription,
                "generation": 0,
                "owned_active": outcome.assignment[m],
            }
            for m in ids
            if m != gone
        },
    }
    _, plan_leave = timed(
        "assignor.plan, one member leaves",
        lambda: assignor.plan(scenario, strategy="cooperative-sticky"),
    )
    java = JAVA_FAST_PATH_SECONDS
    label = "coop-sticky 1M x 2000"
    rows.append((label, "Kafka Java fast path (quoted)", java, "1.0x"))
    for name, seconds in (
        ("ours, core, fresh", core_fresh),
        ("ours, core, one leaves", core_leave),
        ("ours, core, one joins", core_join),
        ("ours, assignor.plan, one leaves", plan_leave),
    ):
        ratio = java / seconds
        rows.append(
            (label, name, seconds, f"{ratio:.2f}x" if ratio < 1 else f"{ratio:.1f}x faster")
        )


def table() -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    widths = [max(len(r[i]) for r in rows) for i in (0, 1)]
    print()
    print(f"(load average {load}; {os.cpu_count()} CPUs)")
    print(f"{'case':<{widths[0]}}  {'assignor':<{widths[1]}}  {'seconds':>9}  vs peer")
    for case, who, seconds, ratio in rows:
        print(f"{case:<{widths[0]}}  {who:<{widths[1]}}  {seconds:>9.3f}  {ratio}")


def main() -> None:
    started = time.perf_counter()
    kip615_sticky()
    million_cooperative()
    table()
    print(f"\n(total {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
