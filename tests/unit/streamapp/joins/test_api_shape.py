"""One shape for every join and aggregate: the same keywords for the same roles, one Outcome, the
old spellings still working (with a DeprecationWarning), docstrings on every public name, and
the topics each declares it writes to."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import pytest

import streamapp.aggregates as aggregates
import streamapp.joins as joins
from streamapp import App
from streamapp.aggregates import WindowedAggregate, Windows, windowed_aggregate, windowed_count
from streamapp.joins import (
    JoinWindow,
    Source,
    SourceRecord,
    StreamTableJoin,
    WindowedJoin,
    stream_table_join,
    windowed_join,
)
from streamapp.joins.declared import WrittenTopic, written_topics

CLASSES = (WindowedJoin, StreamTableJoin, WindowedAggregate)
COMMON = ("output", "partitions", "to_value", "on_record", "batch_records", "dead_letter_topic")


@pytest.fixture
def app(tmp_path: Path) -> App:
    return App("shape", datadir=str(tmp_path), store="memory://", topic_partitions=3)


def test_every_join_and_aggregate_takes_the_common_keywords() -> None:
    for cls in CLASSES:
        parameters = inspect.signature(cls.__init__).parameters
        assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in COMMON)
    # Inputs named by role, each a topic or a Source.
    roles = {
        WindowedJoin: ("left", "right"),
        StreamTableJoin: ("stream", "table"),
        WindowedAggregate: ("source",),
    }
    for cls, names in roles.items():
        parameters = inspect.signature(cls.__init__).parameters
        assert all("Source" in str(parameters[name].annotation) for name in names)


def test_one_outcome_source_and_record_for_the_whole_package() -> None:
    assert aggregates.Outcome is joins.Outcome
    assert aggregates.Source is joins.Source
    assert aggregates.SourceRecord is joins.SourceRecord


def test_the_new_spellings_warn_nothing(app: App) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        orders, payments = app.topic("orders", partitions=3), app.topic("payments", partitions=3)
        WindowedJoin(
            app,
            "j",
            left=Source(orders, time_ms=lambda v: v["ts"]),
            right=payments,
            window=JoinWindow.within(10),
            output=print,
        )
        StreamTableJoin(app, "t", stream=orders, table=payments, output=print)
        WindowedAggregate.count(app, "a", source=orders, windows=Windows.tumbling(10))


def test_the_old_spellings_warn_and_declare_the_same(app: App) -> None:
    orders, payments = app.topic("orders"), app.topic("payments")

    def ts(value: Any) -> int:
        return int(value["ts"])

    with pytest.warns(DeprecationWarning, match=r"windowed_join\(\.\.\.\) is deprecated"):
        join = windowed_join(
            app,
            "j",
            left=orders,
            right=payments,
            window=JoinWindow.within(10),
            output=print,
            partitions=3,
            left_time_ms=ts,
            right_id=str,
            combine=lambda left, right: (left, right),
        )
    assert isinstance(join, WindowedJoin)
    assert join.sources[joins.Side.LEFT].time_ms is ts
    assert join.sources[joins.Side.RIGHT].id is str
    result = joins.JoinResult("k", 1, 2, 0, 0, 0)
    assert join.to_value(result) == (1, 2)

    with pytest.warns(DeprecationWarning, match=r"WindowedJoin\(left_time_ms=\.\.\.\)"):
        WindowedJoin(
            app, "j2", left=orders, right=payments, window=JoinWindow.within(1), output=print,
            left_time_ms=ts,
        )  # fmt: skip
    with pytest.raises(ValueError, match="time_ms given twice"), pytest.warns(DeprecationWarning):
        WindowedJoin(
            app, "j3", left=Source(orders, time_ms=ts), right=payments,
            window=JoinWindow.within(1), output=print, left_time_ms=ts,
        )  # fmt: skip

    with pytest.warns(DeprecationWarning, match=r"stream_table_join\(\.\.\.\) is deprecated"):
        table_join = stream_table_join(
            app,
            "t",
            stream=orders,
            table_topic=payments,
            output=print,
            partitions=3,
            combine=lambda value, table: [value, table],
        )
    assert isinstance(table_join, StreamTableJoin)
    assert table_join.table_topic is payments
    assert table_join.to_value(joins.Enrichment("k", 1, 2, 0)) == [1, 2]
    with pytest.warns(DeprecationWarning, match=r"StreamTableJoin\(table_topic=\.\.\.\)"):
        StreamTableJoin(app, "t2", stream=orders, table_topic=payments, output=print)

    with pytest.warns(DeprecationWarning, match=r"windowed_aggregate\(\.\.\.\) is deprecated"):
        summed = windowed_aggregate(
            app,
            "a",
            source=orders,
            windows=Windows.tumbling(10),
            initial=int,
            fold=lambda n, v: n + v,
            partitions=3,
            time_ms=ts,
        )
    assert summed.read_from.time_ms is ts
    with pytest.warns(DeprecationWarning, match=r"windowed_count\(\.\.\.\) is deprecated"):
        counted = windowed_count(
            app, "c", source=orders, windows=Windows.tumbling(10), partitions=3
        )
    assert counted.processor.fold(2, "anything") == 3
    with pytest.warns(DeprecationWarning, match=r"WindowedAggregate\(time_ms=\.\.\.\)"):
        WindowedAggregate(
            app, "a2", source=orders, windows=Windows.tumbling(1), initial=int, fold=max, time_ms=ts
        )

    with pytest.warns(DeprecationWarning, match="JoinRecord is deprecated"):
        from streamapp.joins import JoinRecord
    assert JoinRecord is SourceRecord
    with pytest.warns(DeprecationWarning, match="JoinRecord is deprecated"):
        from streamapp.joins.stream_stream import JoinRecord as InItsModule
    assert InItsModule is SourceRecord
    assert SourceRecord("left", "k", None, 0, 0, joins.Outcome.ACCEPTED, None).side is (
        joins.Side.LEFT
    )


def test_partitions_come_from_the_topics_when_not_given(app: App) -> None:
    orders = app.topic("orders", partitions=4)
    payments = app.topic("payments", partitions=4)
    join = WindowedJoin(
        app, "j", left=orders, right=payments, window=JoinWindow.within(1), output=print
    )
    assert join.partitions == 4
    assert (
        WindowedAggregate.count(
            app, "a", source=app.topic("clicks"), windows=Windows.tumbling(1)
        ).partitions
        == 3
    )  # the app's topic_partitions
    with pytest.raises(ValueError, match=r"orders \(4\), refunds \(2\)"):
        WindowedJoin(
            app,
            "k",
            left=orders,
            right=app.topic("refunds", partitions=2),
            window=JoinWindow.within(1),
            output=print,
        )


def test_each_declares_the_topics_it_writes_to(app: App) -> None:
    orders, payments = app.topic("orders"), app.topic("payments")
    WindowedJoin(
        app,
        "j",
        left=orders,
        right=payments,
        window=JoinWindow.within(1),
        output=app.topic("paid", partitions=6),
        dead_letter_topic="j-late",
    )
    StreamTableJoin(
        app,
        "t",
        stream=orders,
        table=payments,
        output=app.topic("labelled"),
        history_ms=10,
        dead_letter_topic="t-late",
    )
    WindowedAggregate.count(app, "a", source=orders, windows=Windows.tumbling(1), output=print)
    assert written_topics(app) == [
        WrittenTopic("j-late", 1, None, "late records of join j"),
        WrittenTopic("labelled", 3, None, "output of join t"),
        WrittenTopic("paid", 6, None, "output of join j"),
        WrittenTopic("t-late", 1, None, "late records of join t"),
    ]


def _public_members(obj: Any) -> list[tuple[str, Any]]:
    return [
        (name, member)
        for name, member in vars(obj).items()
        if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property))
    ]


@pytest.mark.parametrize("package", [joins, aggregates], ids=lambda p: p.__name__)
def test_every_public_name_has_a_docstring(package: Any) -> None:
    """The API reference is generated from the docstrings: each public name, and each public
    method of a public class, says what it does."""
    missing = []
    for name in package.__all__:
        obj = getattr(package, name)
        if not (inspect.getdoc(obj) or "").strip():
            missing.append(name)
        if inspect.isclass(obj) and obj.__module__.startswith("streamapp."):
            for member_name, member in _public_members(obj):
                if not (inspect.getdoc(member) or "").strip():
                    missing.append(f"{name}.{member_name}")
    assert missing == []
