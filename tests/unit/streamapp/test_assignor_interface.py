"""streamapp's assignor answers what Faust and aiokafka ask of a partition assignor.

On a real faust App whose ``PartitionAssignor`` setting is streamapp's: the leader plans a group
of two workers, this worker takes its share, and Faust's own callers (``app.router``, the
sensors, the table recovery's ``assigned_*``) get their answers from it. Which member gets what
is the planner's business (tests/unit/streamapp/test_partition_assignor.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from faust.assignor import PartitionAssignor
from faust.types import TP
from faust.types.assignor import PartitionAssignorT
from yarl import URL

import streamapp
from assignor.metadata_codec import MemberMetadata, encode_metadata
from streamapp.assignor_interface import AssignorInterface
from streamapp.partition_assignor import PROTOCOL_NAME, StreamappPartitionAssignor
from streamapp.runtime.stores import STORE_URL
from streamapp.settings import StreamappSettings

SOURCE = "visits"
CHANGELOG = "sa-iface-counts-changelog"
OTHER_URL = "http://other-worker:6067"


class Cluster:
    """What the leader asks of aiokafka's ClusterMetadata: each topic's partitions."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self.counts.get(topic)
        return set(range(n)) if n else None


class Recorded(faust.Sensor):
    """A Faust sensor noting the assignor calls it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    def on_assignment_start(self, assignor: PartitionAssignorT) -> dict[str, Any]:
        self.calls.append(("start", assignor))
        return {"started": True}

    def on_assignment_error(
        self, assignor: PartitionAssignorT, state: dict[str, Any], exc: BaseException
    ) -> None:
        self.calls.append(("error", (assignor, state, exc)))

    def on_assignment_completed(self, assignor: PartitionAssignorT, state: dict[str, Any]) -> None:
        self.calls.append(("completed", (assignor, state)))


@pytest.fixture
def app(tmp_path: Path) -> faust.App:
    app = faust.App(
        "sa-iface",
        store=STORE_URL,
        datadir=str(tmp_path),
        PartitionAssignor=StreamappPartitionAssignor,
        table_standby_replicas=1,
        canonical_url="http://this-worker:6066",
    )
    app.Table("counts", default=int, partitions=4)
    app.streamapp_settings = StreamappSettings(client_id="w1", num_standby_replicas=1)  # type: ignore[attr-defined]
    return app


def _assignor(app: faust.App) -> StreamappPartitionAssignor:
    assert isinstance(app.assignor, StreamappPartitionAssignor)
    return app.assignor


def _planned_and_taken(app: faust.App) -> StreamappPartitionAssignor:
    """The leader's plan of this worker and another, and this worker's share taken."""
    assignor = _assignor(app)
    topics = [SOURCE, CHANGELOG]
    other = ConsumerProtocolMemberMetadata(
        4, topics, encode_metadata(MemberMetadata(client_id="w2", url=OTHER_URL))
    )
    out = assignor.assign(
        Cluster({SOURCE: 4, CHANGELOG: 4}),
        {"m-self": assignor.metadata(set(topics)), "m-other": other},
    )
    assignor.on_assignment(out["m-self"])
    return assignor


def _by_topic(tps: set[TP]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for tp in sorted(tps):
        found.setdefault(tp.topic, []).append(tp.partition)
    return found


def test_the_setting_builds_streamapps_own_class_on_the_public_interfaces(app: faust.App) -> None:
    assignor = _assignor(app)
    assert isinstance(assignor, PartitionAssignorT)
    assert isinstance(assignor, AbstractPartitionAssignor)
    assert not isinstance(assignor, PartitionAssignor)
    assert (assignor.name, assignor.version, assignor.replicas) == (PROTOCOL_NAME, 4, 1)
    assert assignor.url == "http://this-worker:6066"


def test_a_streamapp_app_registers_it_through_the_setting(tmp_path: Path) -> None:
    app = streamapp.App("sa-iface-own", datadir=str(tmp_path))
    assert app.conf.PartitionAssignor is StreamappPartitionAssignor
    assert isinstance(app.assignor, AssignorInterface)


def test_before_any_assignment_it_holds_nothing(app: faust.App) -> None:
    assignor = _assignor(app)
    assert assignor.assigned_actives() == set() == assignor.assigned_standbys()
    assert not assignor.is_active(TP(SOURCE, 0)) and not assignor.is_standby(TP(CHANGELOG, 0))
    assert assignor.tables_metadata() == {} == assignor.external_topics_metadata()
    with pytest.raises(KeyError):
        assignor.group_for_topic(SOURCE)


def test_the_metadata_announces_the_url_the_router_sends_to(app: faust.App) -> None:
    from assignor.metadata_codec import decode_metadata

    sent = decode_metadata(_assignor(app).metadata({SOURCE}).user_data)
    assert sent.url == "http://this-worker:6066"


def test_what_this_worker_holds_is_answered_from_its_share(app: faust.App) -> None:
    assignor = _planned_and_taken(app)
    share = assignor.share
    actives = assignor.assigned_actives()
    standbys = assignor.assigned_standbys()
    assert _by_topic(actives) == {t: sorted(ps) for t, ps in share.active.items() if ps}
    # A standby is kept of every changelog partition the other worker holds active.
    assert {tp for tp in standbys if tp.topic == CHANGELOG} == {
        TP(CHANGELOG, p) for p in range(4) if TP(CHANGELOG, p) not in actives
    }
    assert len([tp for tp in actives if tp.topic == SOURCE]) == 2
    for tp in actives:
        assert assignor.is_active(tp) and not assignor.is_standby(tp)
    for tp in standbys:
        assert assignor.is_standby(tp) and not assignor.is_active(tp)
    # Faust's callers may change what they are given: the assignor's state stays.
    actives.clear()
    assert assignor.assigned_actives()
    # A source topic and its table's changelog are one copartitioned group.
    assert assignor.group_for_topic(SOURCE) == assignor.group_for_topic(CHANGELOG)


def test_the_router_finds_the_worker_holding_a_key(
    app: faust.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    assignor = _planned_and_taken(app)
    own = {tp.partition for tp in assignor.assigned_actives() if tp.topic == CHANGELOG}
    assert len(own) == 2
    tables = assignor.tables_metadata()
    assert {url: sorted(by_topic[CHANGELOG]) for url, by_topic in tables.items()} == {
        "http://this-worker:6066": sorted(own),
        OTHER_URL: sorted({0, 1, 2, 3} - own),
    }
    assert assignor.table_metadata(CHANGELOG) == tables
    assert app.router.tables_metadata() == tables
    assert app.router.table_metadata("counts") == tables
    assert {url: sorted(t[SOURCE]) for url, t in app.router.external_topics_metadata().items()} == {
        "http://this-worker:6066": sorted(own),
        OTHER_URL: sorted({0, 1, 2, 3} - own),
    }
    # The producer's partitioner needs a broker's metadata: here a key (as JSON, the table's key
    # encoding) names its partition.
    monkeypatch.setattr(
        app.producer, "key_partition", lambda topic, key: TP(topic, int(json.loads(key)))
    )
    for partition in range(4):
        holder = "http://this-worker:6066" if partition in own else OTHER_URL
        assert app.router.key_store("counts", str(partition)) == URL(holder)
        assert assignor.external_key_store(SOURCE, str(partition).encode()) == URL(holder)


def test_faust_sensors_see_each_plan_and_its_failure(
    app: faust.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = Recorded()
    app.sensors.add(recorded)
    assignor = _planned_and_taken(app)
    assert [name for name, _ in recorded.calls] == ["start", "completed"]
    assert recorded.calls[1][1] == (assignor, {"started": True})

    def broken(*_args: Any) -> Any:
        raise RuntimeError("plan failed")

    monkeypatch.setattr(assignor, "plan_group", broken)
    with pytest.raises(RuntimeError, match="plan failed"):
        assignor.assign(Cluster({SOURCE: 4}), {"m-self": assignor.metadata({SOURCE})})
    name, (who, state, exc) = recorded.calls[-1]
    assert (name, who, state, str(exc)) == ("error", assignor, {"started": True}, "plan failed")


class Span:
    def __init__(self, name: str, tags: dict[str, Any]) -> None:
        self.name, self.tags, self.open = name, dict(tags), False

    def __enter__(self) -> Span:
        self.open = True
        return self

    def __exit__(self, *_exc: object) -> None:
        self.open = False

    def set_tag(self, key: str, value: Any) -> None:
        assert self.open, "a tag set outside the span"
        self.tags[key] = value


class Tracer:
    """What the assignor asks of an app's opentracing tracer."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    def get_tracer(self, _service: str) -> Tracer:
        return self

    def start_span(self, operation_name: str, tags: dict[str, Any]) -> Span:
        self.spans.append(Span(operation_name, tags))
        return self.spans[-1]


def test_an_apps_tracer_gets_a_span_of_each_plan(app: faust.App) -> None:
    tracer = Tracer()
    app.tracer = tracer  # type: ignore[assignment]
    assignor = _assignor(app)
    out = assignor.assign(Cluster({SOURCE: 4}), {"m-self": assignor.metadata({SOURCE})})
    [span] = tracer.spans
    assert span.name == "coordinator_assignment" and "hostname" in span.tags
    assert span.tags["assignment"] == out
