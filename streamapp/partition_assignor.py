"""The Faust adapter: streamapp's state-aware assignment behind Faust's `PartitionAssignor` API.

It gathers facts and applies decisions, and decides nothing itself:

- ``metadata()``: this worker's identity, what it held, and the changelog offsets of every local
  store on disk (`tables.inventory.LocalStateInventory`; a store open here by the offset noted
  as it was written, `streamapp.runtime.stores.open_offsets`), encoded by
  `assignor.metadata_codec`.
- ``assign()`` (group leader): every member decoded into a plan.md scenario
  (`streamapp.group_scenario`), `assignor.plan` called, each member's share encoded. The leader
  trusts only what it can check: a member whose metadata does not decode gets no work; offsets
  are held against the broker's changelog end offsets (read on the main loop by
  `standby.runtime`, since ``assign()`` runs synchronously on aiokafka's consumer thread and
  cannot ask the broker), and ones found false count for nothing; claims above the group's
  generation do not count; a member caught in both lies gets no work.
- ``on_assignment()``: actives and replicas handed to Faust (recovery replays only the tail past
  the local offset; standbys *and* warmups are Faust standbys), replica tracking to `standby`.

Everything Faust's router and table recovery read (``assigned_actives``, ``key_store``,
``tables_metadata``, ``external_*``...) is answered from the share, by
`streamapp.assignor_interface.AssignorInterface`, streamapp's implementation of Faust's and
aiokafka's assignor interfaces.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

import assignor
from assignor.metadata_codec import (
    MemberAssignment,
    MemberMetadata,
    MetadataError,
    StockFaustMetadataError,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
)
from standby.replica_offsets import with_applied
from standby.runtime import ReplicaRuntime
from streamapp.assignor_interface import AssignorInterface
from streamapp.group_scenario import (
    CheckedFacts,
    GroupSettings,
    MemberFacts,
    build_scenario,
    check_facts,
    kafka_partitions,
    next_generation,
    rebalance_protocols,
    shares_from_result,
    with_global_tables,
)
from streamapp.left_out_topics import LeftOutTopics
from streamapp.runtime import stores
from streamapp.settings import RebalanceProtocol, StreamappSettings
from tables.identity import load_or_create_client_id
from tables.inventory import LocalStateInventory
from tables.ownership import Ownership, load_ownership
from tables.ownership_writer import OwnershipWriter

logger = logging.getLogger(__name__)

#: The group protocol name. Distinct from stock Faust's ("faust"), so the broker refuses a
#: stock-Faust worker that tries to join (InconsistentGroupProtocolError, fatal for it) and
#: a stock assignor never decides for streamapp members. (Offering "faust" as a second protocol,
#: to refuse such a worker ourselves with a message, is not possible on aiokafka 0.14: it sends
#: one JoinGroup per assignor, and the group never settles.)
PROTOCOL_NAME = "streamapp"

STOCK_FAUST_REFUSED = (
    "member {member} runs stock Faust's PartitionAssignor and was given no partitions: "
    "run it with `streamapp worker -A MODULE:APP` (a streamapp.App), or give it another app id"
)
UNREADABLE_REFUSED = (
    "member {member} sent metadata streamapp cannot read ({cause}) and was given no partitions: "
    "every member of this group must be a streamapp worker of the same version"
)
GENERATION_IGNORED = (
    "member {member} (client {client}) claims partitions at generation {claimed}, above any "
    "this group has had ({known}): its claims are ignored, its local state still counts"
)
LIAR_REFUSED = (
    "member {member} (client {client}) claims partitions at generation {claimed}, above any "
    "this group has had ({known}), and changelog offsets the broker does not have ({offsets}): "
    "nothing it says holds, so it was given no partitions"
)


class StreamappPartitionAssignor(AssignorInterface):
    """Set as ``streamapp.App``'s ``PartitionAssignor``."""

    #: The `assignor.plan` strategy the leader runs.
    strategy = "stateful"

    def __init__(self, app: Any, replicas: int = 0) -> None:
        super().__init__(app, replicas=replicas)
        # After a restart, what this worker held before it stopped (generation and all).
        kept = load_ownership(self.data_dir)
        #: Writes each assignment's record off aiokafka's consumer thread (see the module).
        self._ownership = OwnershipWriter(self.data_dir)
        self._share = (
            MemberAssignment(
                generation=kept.generation,
                active=kept.active,
                standby=kept.standby,
                incoming=kept.incoming,
                warmup=kept.warmup,
            )
            if kept
            else MemberAssignment(generation=-1)
        )
        self._warned: set[tuple[str, str]] = set()
        #: The last generation this worker planned as the group's leader.
        self._planned_generation = -1
        #: Whether this worker kept what it owns through the join under way (cooperative).
        self._kept_owned = False
        #: Whether Faust's handlers are running for a join this worker kept its partitions
        #: through (read by `streamapp.runtime.group.cooperative`).
        self.incremental_join = False
        self._inventory: LocalStateInventory | None = None
        #: Refreshes the leader's metadata until the topics its last plan left out are known.
        self._left_out: LeftOutTopics | None = None

    @property
    def name(self) -> str:
        return PROTOCOL_NAME

    # -- facts about this worker --

    @property
    def settings(self) -> StreamappSettings:
        settings: StreamappSettings | None = getattr(self.app, "streamapp_settings", None)
        return settings if settings is not None else StreamappSettings()

    @property
    def client_id(self) -> str:
        settings = self.settings
        if settings.client_id is None:
            # Not started by `streamapp worker`: still keep an identity in the data dir.
            client_id = load_or_create_client_id(self.data_dir)
            self.app.streamapp_settings = replace(  # type: ignore[attr-defined]
                settings, client_id=client_id
            )
            return client_id
        return settings.client_id

    @property
    def data_dir(self) -> Path:
        return Path(self.app.conf.datadir)

    @property
    def runtime(self) -> ReplicaRuntime | None:
        runtime: ReplicaRuntime | None = getattr(self.app, "streamapp_runtime", None)
        return runtime

    def inventory(self) -> LocalStateInventory:
        changelogs = {
            table.name: table.changelog_topic.get_topic_name()
            for table in self.app.tables.values()
            if not table.is_global
        }
        tabledir = Path(self.app.conf.tabledir)
        kept = self._inventory
        if kept is None or kept.tabledir != tabledir or kept.changelog_topics != changelogs:
            # Kept from join to join: it reads a store nobody has open once (tables.inventory).
            kept = self._inventory = LocalStateInventory(tabledir, changelogs)
        return kept

    def metadata(self, topics: set[str]) -> ConsumerProtocolMemberMetadata:
        # Stores open here are not opened again: their offsets are noted as they are written.
        offsets = self.inventory().offsets(known=stores.open_offsets(self.app.tables.values()))
        runtime = self.runtime
        if runtime is not None:
            # A replica's records are written to its store in batches: report what was applied.
            offsets = with_applied(offsets, runtime.replica_applied)
        settings = self.settings
        own = MemberMetadata(
            client_id=self.client_id,
            url=self.url,
            host=settings.host,
            rack=settings.rack,
            capacity=settings.capacity,
            generation=self._share.generation,
            owned_active=self._share.active,
            owned_standby=self._share.standby,
            offsets=offsets,
            changelog_ends=self._replica_ends(),
            protocol="cooperative" if self._speaks_cooperative() else "eager",
            kept_owned=self._kept_owned,
            incoming=self._share.incoming,
            # Which replicas were warmups: the follow-up moves the tasks they were for.
            warmup=self._share.warmup,
        )
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), encode_metadata(own))

    def _replica_ends(self) -> dict[str, dict[int, int]]:
        runtime = self.runtime
        ends: dict[str, dict[int, int]] = {}
        for tp, end in (runtime.replica_ends if runtime is not None else {}).items():
            ends.setdefault(tp.topic, {})[tp.partition] = end
        return ends

    # -- the rebalance protocol (asked by `streamapp.runtime.group.cooperative`) --

    def keeps_owned_through_join(self) -> bool:
        """Whether this worker keeps what it owns through the next join (KIP-429).

        Only once the group runs cooperative: this worker speaks it, and the last plan said
        every member does (until then a cooperative worker behaves eagerly, see
        `streamapp.group_scenario.rebalance_protocols`).
        """
        return self._speaks_cooperative() and self._share.group_protocol == "cooperative"

    def _speaks_cooperative(self) -> bool:
        # Under exactly_once too: an incremental rebalance commits and ends the transactions of
        # what is lost and opens those of what is gained (`streamapp.runtime.rebalance`).
        return self.settings.rebalance_protocol is RebalanceProtocol.COOPERATIVE

    def on_join_prepared(self, *, kept_owned: bool) -> None:
        """The coordinator prepared a join, keeping what this worker owns or giving it all up."""
        self._kept_owned = kept_owned

    def on_incremental_join(self, incremental: bool) -> None:
        """The coordinator hands a cooperative join's outcome to Faust's handlers (True), or
        is done with it (False). Decided once for the join's two handler calls: incremental
        unless the recovery of an earlier eager rebalance is still under way (its partitions
        wait paused for that recovery, which only Faust's handlers finish)."""
        self.incremental_join = incremental

    # -- the leader --

    def plan_group(
        self,
        cluster: ClusterMetadata,
        member_metadata: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        facts: dict[str, MemberFacts] = {}
        urls: dict[str, str] = {}
        refused: list[str] = []
        runtime = self.runtime
        # Global tables' changelogs are not planned: every member holds all of them.
        global_topics = {
            table.changelog_topic.get_topic_name()
            for table in self.app.tables.values()
            if table.is_global
        }
        for member_id, protocol_metadata in member_metadata.items():
            subscription = [t for t in protocol_metadata.subscription if t not in global_topics]
            try:
                decoded = decode_metadata(protocol_metadata.user_data)
            except StockFaustMetadataError:
                self._warn_once(member_id, "stock", STOCK_FAUST_REFUSED.format(member=member_id))
                refused.append(member_id)
                continue
            except MetadataError as exc:
                # Work given to a member that cannot tell what it holds goes unprocessed for as
                # long as it stays: nothing it says can be checked, so it gets nothing.
                self._warn_once(
                    member_id,
                    "unreadable",
                    UNREADABLE_REFUSED.format(member=member_id, cause=exc),
                )
                refused.append(member_id)
                continue
            facts[member_id] = MemberFacts(subscription, decoded)
            urls[member_id] = decoded.url

        # From every member that can be read, before any is refused: a member that kept its
        # partitions through this join holds them, whether or not the leader believes it.
        plan_protocol, group_protocol = rebalance_protocols(facts.values())
        broker_ends = self._broker_ends()
        group_generation = self._group_generation()
        checked = check_facts(
            facts,
            broker_ends=broker_ends,
            group_generation=group_generation,
            false_offsets=self._false_offsets(),
        )
        self._warn_checked(checked, facts, group_generation, broker_ends)
        refused.extend(sorted(checked.refused))
        if runtime is not None:
            # An offset above the end the leader last read may be honest (written since that
            # read): the runtime tells which, against the broker's end read again later.
            runtime.note_offsets_beyond_end(
                {
                    member_id: (_client_id(facts[member_id]), beyond)
                    for member_id, beyond in checked.offsets_beyond_end.items()
                    if member_id not in checked.refused
                },
                present=set(member_metadata),
            )
        facts = checked.members

        subscribed = {t for f in facts.values() for t in f.subscription}
        topics = {}
        left_out: set[str] = set()
        for topic in sorted(subscribed):
            count = len(cluster.partitions_for_topic(topic) or ())
            if count:
                topics[topic] = count
            else:
                logger.warning("streamapp: topic %r has no partitions (yet); left out", topic)
                left_out.add(topic)
        # Global tables' changelogs too: a global table whose changelog is left out is read
        # by no member. Its metadata is asked again until each is known (see left_out_topics).
        left_out |= {t for t in global_topics if not cluster.partitions_for_topic(t)}
        self._left_out_topics(cluster).note(left_out)
        settings = self.settings
        scenario = build_scenario(
            topics=topics,
            changelog_topics=self.app.tables.changelog_topics,
            members=facts,
            settings=GroupSettings(
                num_standbys=settings.num_standby_replicas,
                acceptable_recovery_lag=settings.acceptable_recovery_lag,
                max_warmup_replicas=settings.max_warmup_replicas,
            ),
            broker_ends=broker_ends,
            protocol=plan_protocol,
            kept_active=checked.kept_active,
        )
        result = assignor.plan(scenario, strategy=self.strategy)
        generation = next_generation(facts.values())
        self._planned_generation = generation
        shares = with_global_tables(
            shares_from_result(
                result, generation=generation, urls=urls, group_protocol=group_protocol
            ),
            {
                t: count
                for t in global_topics
                if (count := len(cluster.partitions_for_topic(t) or ()))
            },
        )
        logger.info(
            "streamapp: planned generation %s for %d member(s): %s",
            generation,
            len(shares),
            {
                **result.get("stats", {}),
                # What the leader's own checks changed before the plan (see check_facts).
                "offsets_beyond_end": checked.offsets_beyond_end_count,
                "offsets_not_counted": sum(
                    len(ps) for t in checked.offsets_not_counted.values() for ps in t.values()
                ),
                "claims_above_generation": len(checked.claims_above_generation),
                "members_refused": len(refused),
                **(
                    {
                        "protocol": plan_protocol,
                        "revoking": sum(
                            len(ps)
                            for by_topic in result.get("revoking", {}).values()
                            for ps in by_topic.values()
                        ),
                    }
                    if plan_protocol != "eager"
                    else {}
                ),
            },
        )
        out = {
            member_id: ConsumerProtocolMemberAssignment(
                self.version, kafka_partitions(share), encode_assignment(share)
            )
            for member_id, share in shares.items()
        }
        for member_id in refused:
            out[member_id] = ConsumerProtocolMemberAssignment(
                self.version, [], encode_assignment(MemberAssignment(generation=-1))
            )
        return out

    async def on_consumer_thread_stop(self) -> None:
        """The worker's consumer thread is stopping: the leader's metadata refreshes, which run
        on its loop through its consumer, end first (`LeftOutTopics.stop`)."""
        if self._left_out is not None:
            await self._left_out.stop()

    def _left_out_topics(self, cluster: ClusterMetadata) -> LeftOutTopics:
        if self._left_out is None:
            app = self.app
            self._left_out = LeftOutTopics(
                refresh=lambda: app.consumer.refresh_metadata(),  # type: ignore[attr-defined]
                known=lambda topic: bool(cluster.partitions_for_topic(topic)),
            )
        return self._left_out

    def _warn_checked(
        self,
        checked: CheckedFacts,
        facts: Mapping[str, MemberFacts],
        group_generation: int | None,
        broker_ends: Mapping[str, Mapping[int, int]],
    ) -> None:
        for member_id, claimed in sorted(checked.claims_above_generation.items()):
            if member_id in checked.refused:
                beyond = sorted(
                    (topic, p, offset, end)
                    for topic, parts in checked.offsets_beyond_end[member_id].items()
                    for p, offset in parts.items()
                    if (end := broker_ends.get(topic, {}).get(p)) is not None
                )
                shown = ", ".join(f"{t}[{p}] at {o}, end {e}" for t, p, o, e in beyond[:3])
                more = f", and {len(beyond) - 3} more" if len(beyond) > 3 else ""
                message = LIAR_REFUSED.format(
                    member=member_id,
                    client=_client_id(facts[member_id]),
                    claimed=claimed,
                    known=group_generation,
                    offsets=shown + more,
                )
                self._warn_once(member_id, "refused", message)
                continue
            self._warn_once(
                member_id,
                "generation",
                GENERATION_IGNORED.format(
                    member=member_id,
                    client=_client_id(facts[member_id]),
                    claimed=claimed,
                    known=group_generation,
                ),
            )

    def _false_offsets(self) -> dict[str, set[tuple[str, int]]]:
        """Member -> (topic, partition) whose reported offset the runtime found false."""
        runtime = self.runtime
        found = runtime.false_offsets if runtime is not None else {}
        return {m: {(tp.topic, tp.partition) for tp in tps} for m, tps in found.items()}

    def _broker_ends(self) -> dict[str, dict[int, int]]:
        """Changelog end offsets from the broker, as the main loop last read them."""
        runtime = self.runtime
        ends: dict[str, dict[int, int]] = {}
        # One read of the attribute: the main loop replaces the mapping, never changes it.
        for tp, end in (runtime.changelog_ends if runtime is not None else {}).items():
            ends.setdefault(tp.topic, {})[tp.partition] = end
        return ends

    def _group_generation(self) -> int | None:
        """The highest generation this worker has seen for its group, ``None`` if none yet.

        Plan generations it applied or planned itself, and the group's Kafka generation (the
        broker's count of rebalances, which a plan generation of the same group history does not
        pass: each plan is made in a rebalance of its own).
        """
        runtime = self.runtime
        kafka_generation = runtime.member()[1] if runtime is not None else None
        seen = [self._share.generation, self._planned_generation, kafka_generation or -1]
        known = max(seen)
        return known if known >= 1 else None

    def _warn_once(self, member_id: str, kind: str, message: str) -> None:
        if (member_id, kind) not in self._warned:
            self._warned.add((member_id, kind))
            logger.warning("streamapp: %s", message)

    # -- every member --

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        try:
            share = decode_assignment(assignment.user_data)
        except MetadataError as exc:
            raise MetadataError(
                f"the group leader sent an assignment streamapp cannot read ({exc}): "
                "every worker of this app must be a streamapp worker of the same version"
            ) from None
        replicas: dict[str, list[int]] = {}
        for part in (share.standby, share.warmup):
            for topic, partitions in part.items():
                replicas[topic] = sorted({*replicas.get(topic, []), *partitions})
        self._share = share
        self.hold(
            actives=share.active,
            standbys=replicas,
            topic_groups=share.topic_groups,
            actives_by_url=share.actives_by_url,
        )
        given = sorted((t, sorted(ps)) for t, ps in assignment.assignment)
        if given != kafka_partitions(share):
            logger.error(
                "streamapp: Kafka assignment %s differs from the plan's share %s",
                given,
                kafka_partitions(share),
            )
        self._ownership.save(
            Ownership(
                generation=share.generation,
                active=share.active,
                standby=share.standby,
                incoming=share.incoming,
                warmup=share.warmup,
            )
        )
        runtime = self.runtime
        if runtime is not None:
            runtime.on_assignment(share)

    @property
    def share(self) -> MemberAssignment:
        """This worker's share of the current plan."""
        return self._share

    def flush_ownership(self, timeout: float | None = None) -> bool:
        """Wait until the last assignment's ownership record is on disk (a clean shutdown);
        False if ``timeout`` seconds passed first."""
        return self._ownership.flush(timeout)


def _client_id(facts: MemberFacts) -> str:
    return facts.metadata.client_id if facts.metadata is not None else "?"
