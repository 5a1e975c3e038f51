"""docs/windows.md's examples declare what the page says: run its Python blocks, no broker."""

from __future__ import annotations

import re
import warnings
from typing import Any

from streamapp import topic_check
from streamapp.aggregates import AggregateProcessor, Outcome
from tests.paths import DOCS

DOC = DOCS / "windows.md"


def _run(block: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # no old spelling in the docs
        exec(compile(block, str(DOC), "exec"), namespace)
    return namespace


def test_the_docs_examples_declare_their_aggregates() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 2
    shop = _run(blocks[0])["app"]
    assert "sales-sessions-windows" in {t.table for t in topic_check.declared_topics(shop).tables}
    namespace = _run(blocks[1])
    app = namespace["app"]
    declared = topic_check.declared_topics(app)
    assert {t.table for t in declared.tables} == {
        "clicks-per-minute-windows",
        "spend-10-minutes-windows",
    }
    # The example's hopping sum, over a dict instead of its table: 10 windows per click.
    spend = namespace["spend"]
    proc: AggregateProcessor[float] = AggregateProcessor(
        spend.windows, {}, initial=spend.processor.initial, fold=spend.processor.fold
    )
    for offset, (ts, amount) in enumerate([(60_000, 2.5), (119_999, 1.0), (600_000, 4.0)]):
        assert proc.process(0, "u", offset, ts, {"ts": ts, "amount": amount}).outcome is (
            Outcome.ACCEPTED
        )
    held = proc.windows_of("u")
    assert held[0] == 3.5  # [0, 600000): the first two clicks
    assert held[60_000] == 7.5  # [60000, 660000): all three
    # Every 10-minute window holding one of them: from the one starting 9 minutes before 60000.
    assert set(held) == set(range(-480_000, 600_001, 60_000))
