"""The base of streamapp's partition assignor: Faust's, with its leader step opened up."""

from __future__ import annotations

from collections.abc import Mapping

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from faust.assignor import PartitionAssignor


class FaustPartitionAssignor(PartitionAssignor):
    """Faust's PartitionAssignor, whose ``assign`` hands the leader's planning to `plan_group`.

    Faust's ``assign`` decodes nothing itself and calls ``_perform_assignment`` with the
    cluster and every member's protocol metadata; that private step is the one streamapp
    replaces, under a public name.
    """

    def _perform_assignment(
        self,
        cluster: ClusterMetadata,
        member_metadata: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        return self.plan_group(cluster, member_metadata)

    def plan_group(
        self,
        cluster: ClusterMetadata,
        member_metadata: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        """The leader's assignment of every member of the group."""
        raise NotImplementedError
