"""Faust's leader topic is recognised by its name's end only."""

from __future__ import annotations

from assignor.faust_names import is_leader_topic


def test_the_leader_topic_and_nothing_else() -> None:
    assert is_leader_topic("orders-app-__assignor-__leader")
    assert not is_leader_topic("orders-app-__assignor-__leader-changelog")
    assert not is_leader_topic("__assignor-leader")
