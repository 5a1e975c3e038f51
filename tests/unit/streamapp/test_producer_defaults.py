"""streamapp's producer batches changelog and output records by default, as docs/settings.md says.

Nothing is sent: the producers are built, not started, so no broker is needed.
"""

from __future__ import annotations

import re

import faust
import pytest

from streamapp import App
from streamapp.app import (
    DEFAULT_PRODUCER_LINGER_S,
    DEFAULT_PRODUCER_MAX_BATCH_SIZE,
    EXACTLY_ONCE_PRODUCER_LINGER_S,
)
from tests.paths import DOCS

DOC = DOCS / "settings.md"


def _documented_default(setting: str) -> str:
    [row] = [line for line in DOC.read_text().splitlines() if line.startswith(f"| `{setting}`")]
    return [cell.strip() for cell in row.strip("|").split("|")][3]


def test_the_defaults_are_what_the_docs_say() -> None:
    linger, under_exactly_once = re.fullmatch(
        r"([\d.]+) \(([\d.]+) under exactly_once\)", _documented_default("producer_linger")
    ).groups()  # type: ignore[union-attr]
    assert float(linger) == DEFAULT_PRODUCER_LINGER_S == 0.005
    assert float(under_exactly_once) == EXACTLY_ONCE_PRODUCER_LINGER_S == 0.05
    assert int(_documented_default("producer_max_batch_size")) == DEFAULT_PRODUCER_MAX_BATCH_SIZE


def test_the_producer_lingers_and_batches_by_default() -> None:
    producer = App("producer-defaults").producer
    # What the aiokafka producers (the transactional ones too) are created with.
    assert producer.linger_ms == 5
    assert producer.max_batch_size == 65536
    # Stock Faust sends at once: streamapp's defaults are its own.
    stock = faust.App("producer-defaults-stock").producer
    assert stock.linger_ms == 0 and stock.max_batch_size == 16384


@pytest.mark.parametrize("given", ["keyword", "variable"])
def test_under_exactly_once_the_producer_lingers_longer(
    monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """Its records are read only once their transaction commits, which sends open batches."""
    monkeypatch.delenv("PROCESSING_GUARANTEE", raising=False)
    if given == "keyword":
        app = App("producer-eos", processing_guarantee="exactly_once")
    else:
        monkeypatch.setenv("PROCESSING_GUARANTEE", "exactly_once")
        app = App(
            "producer-eos-variable", processing_guarantee="at_least_once"
        )  # the variable wins
    assert app.conf.processing_guarantee.value == "exactly_once"
    assert app.producer.linger_ms == 50
    kept = App("producer-eos-kept", processing_guarantee="exactly_once", producer_linger=0.01)
    assert kept.producer.linger_ms == 10  # an App keyword still wins


def test_an_app_keyword_overrides_them() -> None:
    producer = App("producer-keyword", producer_linger=0, producer_max_batch_size=16384).producer
    assert producer.linger_ms == 0 and producer.max_batch_size == 16384


def test_fausts_variables_override_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRODUCER_LINGER", "0.02")
    monkeypatch.setenv("PRODUCER_MAX_BATCH_SIZE", "32768")
    producer = App("producer-variables").producer
    assert producer.linger_ms == 20 and producer.max_batch_size == 32768


def test_the_docs_name_every_default_streamapp_changes() -> None:
    rows = re.findall(r"^\| `(\w+)`", DOC.read_text(), flags=re.M)
    for setting in ("producer_linger", "producer_max_batch_size", "Table", "Worker"):
        assert setting in rows, setting
