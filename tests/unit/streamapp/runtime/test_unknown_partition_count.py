"""A topic the consumer's metadata does not know yet has an unknown partition count, not 0, so
Faust's changelog check of a table does not fail the table's writes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from faust.exceptions import PartitionsMismatch

from streamapp import App

SOURCE = "customers"


def app_with_snapshot(tmp_path: Path, snapshot: dict[str, int]) -> tuple[App, str]:
    """An app with a table, whose consumer's metadata is ``snapshot`` (topic -> partition
    count; 0 for a topic it lists without partitions, as a topic created a moment ago)."""
    app = App("sa-unknown-count", datadir=str(tmp_path), topic_partitions=4)
    table = app.Table("names", default=str, partitions=4)
    changelog = table.changelog_topic.get_topic_name()
    counts = {k.replace("{changelog}", changelog): v for k, v in snapshot.items()}

    def partitions_for_topic(topic: str) -> set[int] | None:
        count = counts.get(topic)
        return None if count is None else set(range(count))

    fetch_loop = app.consumer.fetch_loop  # type: ignore[attr-defined]
    fetch_loop.client = SimpleNamespace(partitions_for_topic=partitions_for_topic)
    return app, changelog


def test_a_topic_not_known_yet_has_no_count(tmp_path: Path) -> None:
    app, changelog = app_with_snapshot(tmp_path, {SOURCE: 4, "{changelog}": 0})
    assert app.consumer.topic_partitions(changelog) is None
    assert app.consumer.topic_partitions(SOURCE) == 4
    assert app.consumer.topic_partitions("not-subscribed") is None


def test_a_changelog_not_known_yet_lets_the_table_be_written(tmp_path: Path) -> None:
    # Before the fix: PartitionsMismatch ("... has 4 partitions, but the changelog topic ...
    # has 0 partitions") for every record the table was written for.
    app, _ = app_with_snapshot(tmp_path, {SOURCE: 4, "{changelog}": 0})
    app.tables["names"]._verify_source_topic_partitions(SOURCE)


def test_a_changelog_of_another_count_is_still_refused(tmp_path: Path) -> None:
    app, _ = app_with_snapshot(tmp_path, {SOURCE: 4, "{changelog}": 2})
    with pytest.raises(PartitionsMismatch):
        app.tables["names"]._verify_source_topic_partitions(SOURCE)
