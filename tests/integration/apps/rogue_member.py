"""A stray member of a streamapp group: a plain aiokafka consumer that speaks the ``streamapp``
group protocol but is no streamapp worker.

``python -m tests.integration.apps.rogue_member BOOTSTRAP GROUP MODE TOPIC=PARTITIONS...`` joins
``GROUP`` subscribed to the ``TOPIC``s and sends, as its member metadata:

- ``garbage``: bytes that do not decode as streamapp metadata;
- ``liar``: well-formed streamapp metadata that lies: generation 10**6, every partition of every
  topic owned, every changelog (topics ending in ``-changelog``) applied up to offset 10**9;
- ``offsets``: well-formed streamapp metadata whose only lie is its offsets (10**9, as a store
  that claims more than its changelog holds would report): no generation, nothing owned;
- ``envelope``: random bytes as the whole subscription (not only its user data), so the
  broker itself cannot parse the consumer protocol's envelope (version, topics, user data).
  A Kafka 3.9 broker throws on them as it completes the join, answers UNKNOWN_SERVER_ERROR and
  leaves the group stuck (see `streamapp.runtime.group.join_answers`).

It processes nothing and commits nothing; it prints one JSON line per event on stdout
(``assigned``: its Kafka member id and the partitions the leader gave it; ``leader`` if the
broker made it the group's leader), until it is terminated (SIGTERM: it leaves the group).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from assignor.metadata_codec import MemberMetadata, encode_metadata
from streamapp.partition_assignor import PROTOCOL_NAME

HUGE_GENERATION = 10**6
HUGE_OFFSET = 10**9


def say(event: str, **fields: Any) -> None:
    # ``at``: the wall clock, which the tests compare with the workers' log lines.
    print(json.dumps({"event": event, "at": time.time(), **fields}), flush=True)


class RogueAssignor(AbstractPartitionAssignor):
    """Joins under streamapp's protocol name with metadata that is garbage or lies."""

    # Faust's PartitionAssignor reports version 4; nothing checks it, but look the part.
    version = 4

    def __init__(self, mode: str, counts: Mapping[str, int]) -> None:
        self.mode = mode
        # Given, not read from the consumer's metadata: its first JoinGroup can go out before
        # the metadata of every subscribed topic is in, and the lie would lack those topics.
        self.counts = counts
        self.consumer: AIOKafkaConsumer | None = None

    @property
    def name(self) -> str:
        return PROTOCOL_NAME

    def metadata(  # type: ignore[override]
        self, topics: Iterable[str]
    ) -> ConsumerProtocolMemberMetadata | bytes:
        if self.mode == "envelope":
            # aiokafka sends bytes as they are. Bytes 2-5 are the number of topics (int32):
            # its top bit set, it is < 0 (a null array), which a Kafka 3.9 broker's parser
            # throws on. Wholly random bytes almost always fail there or on a length past the
            # end, with the same outcome (seen: a version < 0, or a topic name of 28672 bytes);
            # pinned so that the test does not hang on the odd bytes that parse.
            envelope = bytearray(os.urandom(64))
            envelope[2] |= 0x80
            return bytes(envelope)
        if self.mode == "garbage":
            # Right header and version, then bytes that do not inflate.
            data = b"SA\x01this is no zlib stream"
        else:
            data = lying_metadata(self.counts, claims=self.mode == "liar")
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), data)

    def assign(  # type: ignore[override]
        self,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        # Only if the workers all left: the tests treat it as a failure of their setup.
        say("leader", members=sorted(members))
        return {m: ConsumerProtocolMemberAssignment(self.version, [], b"") for m in members}

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:  # type: ignore[override]
        given = sorted([topic, p] for topic, ps in assignment.assignment for p in ps)
        # aiokafka has no public member id; the tests look for it in the leader's warnings.
        coordinator = getattr(self.consumer, "_coordinator", None)
        say("assigned", member_id=getattr(coordinator, "member_id", None), partitions=given)


def lying_metadata(counts: Mapping[str, int], *, claims: bool) -> bytes:
    everything = {topic: list(range(n)) for topic, n in counts.items()} if claims else {}
    changelogs = {
        topic: {p: HUGE_OFFSET for p in range(n)}
        for topic, n in counts.items()
        if topic.endswith("-changelog")
    }
    return encode_metadata(
        MemberMetadata(
            client_id="rogue",
            url="http://rogue.invalid:6066",
            generation=HUGE_GENERATION if claims else -1,
            owned_active=everything,
            offsets=changelogs,
            changelog_ends=changelogs,
        )
    )


async def main(bootstrap: str, group: str, mode: str, counts: dict[str, int]) -> None:
    if mode not in ("garbage", "liar", "offsets", "envelope"):
        raise SystemExit(f"unknown mode {mode!r}")
    assignor = RogueAssignor(mode, counts)
    consumer = AIOKafkaConsumer(
        group_id=group,
        bootstrap_servers=bootstrap,
        client_id=f"rogue-{mode}",
        enable_auto_commit=False,
        partition_assignment_strategy=(assignor,),
        session_timeout_ms=8000,
        heartbeat_interval_ms=1000,
    )
    assignor.consumer = consumer
    await consumer.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    consumer.subscribe(sorted(counts))
    say("started", mode=mode)
    try:
        while not stop.is_set():
            # Polling keeps it a live member (max.poll.interval); the records are dropped.
            await consumer.getmany(timeout_ms=500)
    finally:
        await consumer.stop()


if __name__ == "__main__":
    topics = dict(arg.rsplit("=", 1) for arg in sys.argv[4:])
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], {t: int(n) for t, n in topics.items()}))
