"""The worker's pre-join check: which apps it applies to, and what it says."""

from __future__ import annotations

from typing import Any

import faust
import pytest

import streamapp.group_check as group_check
from streamapp import App
from streamapp.group_check import ForeignGroup, foreign_group_message
from streamapp.preflight import WorkerSetupError, check_group_protocol


def test_the_message_names_the_group_the_protocol_and_the_way_out() -> None:
    one = foreign_group_message(ForeignGroup("clicks", "faust", 1), "streamapp")
    assert one.startswith("consumer group 'clicks' is run by 1 stock Faust worker using")
    assert "protocol 'faust', not 'streamapp'" in one
    assert "Stop those workers first" in one and "another id" in one
    many = foreign_group_message(ForeignGroup("clicks", "range", 3), "streamapp")
    assert "is run by 3 consumers using assignor protocol 'range'" in many


def test_a_streamapp_app_is_refused_when_its_group_runs_another_protocol(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[str, str, str]] = []

    async def foreign(bootstrap: str, group_id: str, ours: str, **_: Any) -> ForeignGroup:
        asked.append((bootstrap, group_id, ours))
        return ForeignGroup(group_id, "faust", 2)

    monkeypatch.setattr(group_check, "find_foreign_group", foreign)
    app = App("gc-ours", broker="kafka://127.0.0.1:19092")
    with pytest.raises(WorkerSetupError, match="is run by 2 stock Faust workers"):
        check_group_protocol(app)
    assert asked == [("127.0.0.1:19092", "gc-ours", "streamapp")]


def test_an_app_that_chose_another_assignor_is_not_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def must_not_ask(*_: Any, **__: Any) -> None:
        raise AssertionError("the group was checked")

    monkeypatch.setattr(group_check, "find_foreign_group", must_not_ask)
    app = App("gc-stock", PartitionAssignor="faust.assignor:PartitionAssignor")
    check_group_protocol(app)
    check_group_protocol(faust.App("gc-plain"))
