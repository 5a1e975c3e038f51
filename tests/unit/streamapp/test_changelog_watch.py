"""The changelog watch's log lines and its call once a changelog is right again (no broker)."""

from __future__ import annotations

import logging

import pytest

from streamapp.changelog_watch import ChangelogWatch, changelog_states
from streamapp.topic_check import TableTopic

TABLE = TableTopic(
    table="counts", changelog="app-counts-changelog", partitions=4, follows_sources=True
)


def test_each_change_is_said_once_and_right_again_is_called_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    called: list[str] = []
    watch = ChangelogWatch("127.0.0.1:9092", [TABLE], 1, on_right_again=called.append)
    caplog.set_level(logging.WARNING, logger="streamapp.changelog_watch")
    for existing in ({"app-counts-changelog": 4}, {}, {}, {"app-counts-changelog": 2}):
        watch.observe(changelog_states([TABLE], existing))
    assert called == []  # right from the start, then missing, then wrong: nothing to refresh
    watch.observe(changelog_states([TABLE], {"app-counts-changelog": 4}))
    watch.observe(changelog_states([TABLE], {"app-counts-changelog": 4}))
    assert called == ["app-counts-changelog"]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3
    assert "is missing" in said[0] and "has 2 partitions instead of 4" in said[1]
    assert "is right again (4 partitions)" in said[2]
