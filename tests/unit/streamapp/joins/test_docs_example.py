"""docs/joins.md's examples declare what the page says: run its Python blocks, no broker."""

from __future__ import annotations

import re
import warnings
from typing import Any

from streamapp import topic_check
from streamapp.joins.declared import written_topics
from tests.paths import DOCS

DOC = DOCS / "joins.md"


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.S)


def test_the_docs_examples_declare_co_partitioned_joins_in_the_new_spelling() -> None:
    blocks = python_blocks("joins.md")
    assert len(blocks) == 3
    namespace: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # no old spelling in the docs
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), namespace)
    app = namespace["app"]
    declared = topic_check.declared_topics(app)
    assert declared.copartitioned == (
        ("clicks", "impressions"),
        ("customers", "shipments"),
        ("orders", "payments"),
    )
    assert {t.table for t in declared.tables} == {
        "orders-payments-left",
        "orders-payments-right",
        "shipments-customers-table",
        "shipments-customers-now-table",
        "sales-sessions-windows",
        "clicks-impressions-left",
        "clicks-impressions-right",
    }
    # What `streamapp topics create` makes besides the sources, as the page shows it.
    assert {(t.name, t.partitions, t.why) for t in written_topics(app)} >= {
        ("orders-paid", 4, "output of join orders-payments"),
        ("shipments-labelled", 4, "output of join shipments-customers"),
        ("sales-sessions", 4, "output of aggregate sales-sessions"),
    }
    page = DOC.read_text()
    assert "created orders-paid (4 partitions, replication factor 1): output of join" in page
    # A mismatch is one message naming each topic and its count.
    problems = topic_check.find_problems(
        declared,
        {"orders": 4, "payments": 3, "shipments": 4, "customers": 4, "sales": 4},
    )
    message = topic_check.describe_problems(problems, create_command="streamapp topics create")
    assert "orders has 4 partitions" in message
    assert "payments has 3 partitions" in message
    assert "shop-orders-payments-left-changelog" in message


def test_the_complete_example_is_at_most_40_lines_and_on_both_pages() -> None:
    joins, windows = python_blocks("joins.md")[0], python_blocks("windows.md")[0]
    assert joins == windows
    assert len(joins.strip().splitlines()) <= 40
    for declared in ("WindowedJoin(", "StreamTableJoin(", "history_ms=", "Windows.session("):
        assert declared in joins
