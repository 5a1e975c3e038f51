"""Under exactly_once streamapp commits every half second, as docs/settings.md says; Faust's 2.8 s
stays under at-least-once. No broker: the apps are built, not started."""

from __future__ import annotations

import re

import faust
import pytest

from streamapp import App
from streamapp.app import EXACTLY_ONCE_COMMIT_INTERVAL_S
from tests.paths import DOCS

FAUSTS_DEFAULT = faust.App("commit-interval-stock").conf.broker_commit_interval


def _documented() -> tuple[float, float]:
    [row] = [
        line
        for line in (DOCS / "settings.md").read_text().splitlines()
        if line.startswith("| `broker_commit_interval`")
    ]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    found = re.fullmatch(r"([\d.]+) \(([\d.]+) under exactly_once\)", cells[3])
    assert found, cells[3]
    return float(found[1]), float(found[2])


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROCESSING_GUARANTEE", raising=False)
    monkeypatch.delenv("BROKER_COMMIT_INTERVAL", raising=False)


def test_the_defaults_are_what_the_docs_say() -> None:
    assert _documented() == (FAUSTS_DEFAULT, EXACTLY_ONCE_COMMIT_INTERVAL_S)
    assert EXACTLY_ONCE_COMMIT_INTERVAL_S < FAUSTS_DEFAULT


def test_at_least_once_keeps_fausts_interval() -> None:
    assert App("commit-alo").conf.broker_commit_interval == FAUSTS_DEFAULT


@pytest.mark.parametrize("given", ["keyword", "variable"])
def test_exactly_once_commits_more_often(monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    if given == "keyword":
        app = App("commit-eos", processing_guarantee="exactly_once")
    else:
        monkeypatch.setenv("PROCESSING_GUARANTEE", "exactly_once")
        app = App("commit-eos-variable")
    assert app.conf.broker_commit_interval == EXACTLY_ONCE_COMMIT_INTERVAL_S


def test_a_keyword_or_fausts_variable_still_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = App("commit-eos-kept", processing_guarantee="exactly_once", broker_commit_interval=2.0)
    assert kept.conf.broker_commit_interval == 2.0
    monkeypatch.setenv("BROKER_COMMIT_INTERVAL", "0.3")
    variable = App("commit-eos-var", processing_guarantee="exactly_once")
    assert variable.conf.broker_commit_interval == 0.3
