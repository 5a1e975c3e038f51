"""The source-topic check, without a broker: declared topics and existing counts in, problems out.

What the broker says, and the worker refusing on it, is tests/integration/test_topic_check.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import faust
import pytest

from streamapp import App
from streamapp.settings import SettingsError, StreamappSettings
from streamapp.topic_check import (
    DeclaredTopics,
    GroupMember,
    MissingSourceTopic,
    PartitionCountMismatch,
    SourceTopic,
    TableTopic,
    copartition_groups,
    declared_topics,
    describe_problems,
    find_problems,
)

COMMAND = "streamapp topics create -A myapp:app --broker 127.0.0.1:9092"


def _source(name: str, partitions: int = 8) -> SourceTopic:
    return SourceTopic(name, partitions, replicas=1)


def _table(name: str, partitions: int = 8, *, follows_sources: bool = True) -> TableTopic:
    return TableTopic(name, f"app-{name}-changelog", partitions, follows_sources)


# The README's example: one source feeding one table, both declared with 8 partitions.
CLICKS = DeclaredTopics(sources=(_source("clicks"),), tables=(_table("per-user"),))


def test_nothing_wrong_when_every_topic_is_as_declared() -> None:
    assert find_problems(CLICKS, {"clicks": 8, "app-per-user-changelog": 8}) == []
    # A changelog not created yet is fine: Faust creates it with the table's count.
    assert find_problems(CLICKS, {"clicks": 8}) == []


def test_a_missing_source_topic_is_named_with_its_declared_count() -> None:
    assert find_problems(CLICKS, {}) == [MissingSourceTopic("clicks", 8)]
    assert find_problems(CLICKS, {"app-per-user-changelog": 8}) == [MissingSourceTopic("clicks", 8)]


def test_a_source_sized_unlike_its_table_is_a_mismatch_naming_both() -> None:
    problems = find_problems(CLICKS, {"clicks": 4})
    assert problems == [
        PartitionCountMismatch(
            (
                GroupMember("clicks", 4, exists=True),
                GroupMember("app-per-user-changelog", 8, exists=False, table="per-user"),
            )
        )
    ]
    line = describe_problems(problems, create_command=COMMAND)
    assert "\n" not in line
    assert "clicks has 4 partitions" in line
    assert "app-per-user-changelog (changelog of table per-user) does not exist yet, " in line
    assert "declared with 8 partitions" in line


def test_a_changelog_sized_unlike_its_table_is_a_mismatch() -> None:
    # The old dev broker auto-created a deleted changelog with 1 partition.
    problems = find_problems(CLICKS, {"clicks": 8, "app-per-user-changelog": 1})
    assert problems == [
        PartitionCountMismatch(
            (
                GroupMember("clicks", 8, exists=True),
                GroupMember(
                    "app-per-user-changelog", 1, exists=True, table="per-user", table_declares=8
                ),
            )
        )
    ]
    line = describe_problems(problems, create_command=COMMAND)
    assert (
        "app-per-user-changelog (changelog of table per-user) has 1 partition but the table "
        "declares 8" in line
    )


def test_a_table_tied_to_no_source_still_needs_its_changelog_as_declared() -> None:
    declared = DeclaredTopics(sources=(_source("clicks", 8),), tables=(_table("lookup", 3),))
    assert find_problems(declared, {"clicks": 8, "app-lookup-changelog": 3}) == []
    [problem] = find_problems(declared, {"clicks": 8, "app-lookup-changelog": 1})
    assert problem == PartitionCountMismatch(
        (GroupMember("app-lookup-changelog", 1, exists=True, table="lookup", table_declares=3),)
    )


def test_topics_declared_together_are_co_partitioned_even_without_tables() -> None:
    declared = DeclaredTopics(
        sources=(_source("clicks", 6), _source("impressions", 6)),
        copartitioned=(("clicks", "impressions"),),
    )
    assert find_problems(declared, {"clicks": 6, "impressions": 6}) == []
    [problem] = find_problems(declared, {"clicks": 4, "impressions": 6})
    assert problem == PartitionCountMismatch(
        (GroupMember("clicks", 4, exists=True), GroupMember("impressions", 6, exists=True))
    )


def test_a_missing_partner_counts_with_its_declared_count() -> None:
    # Creating impressions with its declared 6 could not be joined with clicks' 4: both said.
    declared = DeclaredTopics(
        sources=(_source("clicks", 6), _source("impressions", 6)),
        copartitioned=(("clicks", "impressions"),),
    )
    problems = find_problems(declared, {"clicks": 4})
    assert problems == [
        MissingSourceTopic("impressions", 6),
        PartitionCountMismatch(
            (
                GroupMember("clicks", 4, exists=True),
                GroupMember("impressions", 6, exists=False),
            )
        ),
    ]
    line = describe_problems(problems, create_command=COMMAND)
    assert line.startswith("source topic impressions does not exist; create it with 6 partitions")
    assert "impressions does not exist yet, declared with 6 partitions" in line


def test_stateless_sources_of_different_counts_are_not_tied_together() -> None:
    # Neither feeds a table nor is declared with the other: each may have any count.
    declared = DeclaredTopics(sources=(_source("a"), _source("b")))
    assert copartition_groups(declared) == []
    assert find_problems(declared, {"a": 3, "b": 5}) == []


def test_sources_go_with_the_tables_of_their_declared_count() -> None:
    # The ad-click demo: the join (6) and the per-campaign aggregate (3) are two groups.
    declared = DeclaredTopics(
        sources=(
            _source("clicks", 6),
            _source("impressions", 6),
            _source("campaign-clicks", 3),
            _source("campaign-impressions", 3),
        ),
        tables=(_table("impressions", 6), _table("counters", 6), _table("campaign-stats", 3)),
        copartitioned=(("clicks", "impressions"), ("campaign-clicks", "campaign-impressions")),
    )
    assert copartition_groups(declared) == [
        ("campaign-clicks", "campaign-impressions", "table campaign-stats"),
        ("clicks", "impressions", "table counters", "table impressions"),
    ]
    fine = {"clicks": 6, "impressions": 6, "campaign-clicks": 3, "campaign-impressions": 3}
    assert find_problems(declared, fine) == []
    [problem] = find_problems(declared, {**fine, "app-counters-changelog": 3})
    assert isinstance(problem, PartitionCountMismatch)
    assert {m.topic for m in problem.members} == {
        "clicks",
        "impressions",
        "app-impressions-changelog",
        "app-counters-changelog",
    }


def test_a_table_that_uses_the_partitioner_follows_no_source() -> None:
    declared = DeclaredTopics(
        sources=(_source("clicks", 8),), tables=(_table("by-key", 8, follows_sources=False),)
    )
    assert copartition_groups(declared) == []
    assert find_problems(declared, {"clicks": 4}) == []


def test_several_missing_sources_are_one_line_with_each_count() -> None:
    declared = DeclaredTopics(sources=(_source("a", 2), _source("b", 1)))
    problems = find_problems(declared, {})
    assert problems == [MissingSourceTopic("a", 2), MissingSourceTopic("b", 1)]
    assert describe_problems(problems, create_command=COMMAND) == (
        "source topics a (2 partitions), b (1 partition) do not exist; create them with those "
        f"partition counts (as the app declares them): {COMMAND}"
    )


# -- what a Faust app declares --


def _faust_app(tmp_path: Path, **options: Any) -> faust.App:
    return faust.App("decl", datadir=str(tmp_path), topic_partitions=8, **options)


def test_declared_topics_of_an_app(tmp_path: Path) -> None:
    app = _faust_app(tmp_path)
    joined = app.topic("impressions", "clicks", partitions=6)
    plain = app.topic("views")  # no count: the app's topic_partitions
    app.Table("joined", partitions=6)
    app.Table("keyed", use_partitioner=True)
    app.GlobalTable("settings", partitions=1)

    @app.agent(joined)
    async def join(stream: Any) -> None:
        async for _ in stream:
            pass

    @app.agent(plain)
    async def view(stream: Any) -> None:
        async for _ in stream:
            pass

    @app.agent()  # its topic is Faust's own (internal): Faust creates it
    async def internal(stream: Any) -> None:
        async for _ in stream:
            pass

    @app.agent("named-by-string")  # also internal
    async def by_name(stream: Any) -> None:
        async for _ in stream:
            pass

    declared = declared_topics(app)
    assert declared.sources == (
        SourceTopic("clicks", 6, 1),
        SourceTopic("impressions", 6, 1),
        SourceTopic("views", 8, 1),
    )
    assert declared.tables == (
        TableTopic("joined", "decl-joined-changelog", 6, follows_sources=True),
        TableTopic("keyed", "decl-keyed-changelog", 8, follows_sources=False),
    )
    assert declared.copartitioned == (("clicks", "impressions"),)


def test_an_explicit_count_wins_over_the_apps_default(tmp_path: Path) -> None:
    app = _faust_app(tmp_path, topic_replication_factor=3)
    for topic in (app.topic("events"), app.topic("events", partitions=2, replicas=2)):

        @app.agent(topic, name=f"agent-{id(topic)}")
        async def consume(stream: Any) -> None:
            async for _ in stream:
                pass

    assert declared_topics(app).sources == (SourceTopic("events", 2, 2),)


def test_the_readme_app_without_its_topic(tmp_path: Path) -> None:
    app = App("clicks-per-user", datadir=str(tmp_path))
    clicks = app.topic("clicks", key_type=str, value_type=bytes, partitions=8)
    app.Table("per-user", default=int, partitions=8)

    @app.agent(clicks)
    async def count(stream: Any) -> None:
        async for _ in stream:
            pass

    declared = declared_topics(app)
    problems = find_problems(declared, {})
    assert describe_problems(problems, create_command=COMMAND) == (
        "source topic clicks does not exist; create it with 8 partitions (as the app declares "
        f"it): {COMMAND}"
    )


# -- the opt-in and the command line --


def test_create_source_topics_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMAPP_CREATE_SOURCE_TOPICS", raising=False)
    assert StreamappSettings().create_source_topics is False
    assert App("opt-in", create_source_topics=True).streamapp_settings.create_source_topics
    env = {"STREAMAPP_CREATE_SOURCE_TOPICS": "true"}
    assert StreamappSettings().with_env(env).create_source_topics is True
    on = StreamappSettings(create_source_topics=True)
    assert StreamappSettings().with_env(on.to_env()) == on
    with pytest.raises(SettingsError, match="is not a valid boolean"):
        StreamappSettings().with_env({"STREAMAPP_CREATE_SOURCE_TOPICS": "maybe"})


def _streamapp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamapp", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_topics_create_refuses_a_bad_replication_factor_in_one_line() -> None:
    result = _streamapp(
        "topics",
        "create",
        "-A",
        "myapp:app",
        "--broker",
        "127.0.0.1:1",
        "--replication-factor",
        "0",
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "streamapp topics create: --replication-factor 0 must be at least 1"
    ]


def test_topics_create_refuses_an_app_it_cannot_import_in_one_line() -> None:
    result = _streamapp("topics", "create", "-A", "no_such_module_xyz:app")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "streamapp topics create: -A 'no_such_module_xyz:app': cannot import "
        "'no_such_module_xyz': No module named 'no_such_module_xyz'"
    ]


def test_help_names_the_new_options() -> None:
    worker = _streamapp("worker", "--help")
    assert worker.returncode == 0 and "--create-topics" in worker.stdout
    topics = _streamapp("topics", "--help")
    assert topics.returncode == 0
    assert "--replication-factor" in topics.stdout and "partitions=" in topics.stdout
