"""Refusing stock-Faust workers that join a streamapp group, with a message saying what to do.

A streamapp member offers two group protocols: ``streamapp`` first, and ``faust`` (stock Faust's
name) second, served by `StockFaustRefuser`, which plans exactly as streamapp does. While only
streamapp members are in the group the broker picks ``streamapp``. When a stock-Faust worker
joins, ``faust`` is the only protocol every member speaks, so the broker picks it and our leader
plans: the streamapp members get their usual shares, the stock worker gets no partitions and an
assignment in stock Faust's own format that its ``on_assignment`` rejects, with our message in
the assertion it raises: its worker stops, and its log says why and what to do.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from faust.assignor.client_assignment import ClientAssignment, ClientMetadata

if TYPE_CHECKING:
    from streamapp.partition_assignor import StreamappPartitionAssignor

STOCK_PROTOCOL_NAME = "faust"

REFUSAL = (
    "this group is run by streamapp workers and refused this stock-Faust worker (no partitions): "
    "run it with `streamapp worker -A MODULE:APP` on a streamapp.App, or give it another app id"
)


def stock_faust_url(user_data: bytes) -> str:
    """The web URL a stock-Faust member put in its metadata ("" if it has none)."""
    try:
        url = json.loads(user_data).get("url", "")
    except (ValueError, AttributeError):
        return ""
    return url if isinstance(url, str) else ""


def stock_refusal(version: int, url: str) -> ConsumerProtocolMemberAssignment:
    """An assignment of nothing that stock Faust's ``on_assignment`` rejects with `REFUSAL`.

    Stock Faust asserts that the Kafka partitions equal those its metadata lists; listing one
    topic named after the message makes the assertion fail, showing the message.
    """
    metadata = ClientMetadata(
        assignment=ClientAssignment(actives={f"[streamapp] {REFUSAL}": []}, standbys={}),
        url=url,
        changelog_distribution={},
    )
    return ConsumerProtocolMemberAssignment(version, [], zlib.compress(metadata.dumps()))


class StockFaustRefuser(AbstractPartitionAssignor):  # type: ignore[misc]
    """The ``faust`` protocol of a streamapp member: streamapp's plan under stock Faust's name."""

    def __init__(self, assignor: StreamappPartitionAssignor) -> None:
        self.assignor = assignor

    @property
    def name(self) -> str:
        return STOCK_PROTOCOL_NAME

    @property
    def version(self) -> int:
        version: int = self.assignor.version
        return version

    def metadata(self, topics: set[str]) -> ConsumerProtocolMemberMetadata:
        return self.assignor.metadata(topics)

    def assign(
        self, cluster: ClusterMetadata, members: MutableMapping[str, ConsumerProtocolMemberMetadata]
    ) -> Any:
        return self.assignor.assign(cluster, members)

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        self.assignor.on_assignment(assignment)
