"""docs/joins.md's examples declare what the page says: run its Python blocks, no broker."""

from __future__ import annotations

import re
from typing import Any

from streamapp import topic_check
from tests.paths import DOCS

DOC = DOCS / "joins.md"


def test_the_docs_examples_declare_co_partitioned_joins() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 3
    namespace: dict[str, Any] = {}
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
        "clicks-impressions-left",
        "clicks-impressions-right",
        "shipments-customers-table",
    }
    # "Over batches": the one join declared with batch_records reads its sources in batches.
    assert namespace["clicks_impressions"].batch_records == 1000
    # A mismatch is one message naming each topic and its count.
    problems = topic_check.find_problems(
        declared, {"orders": 4, "payments": 3, "shipments": 4, "customers": 4}
    )
    message = topic_check.describe_problems(problems, create_command="streamapp topics create")
    assert "orders has 4 partitions" in message
    assert "payments has 3 partitions" in message
    assert "orders-payments-orders-payments-left-changelog" in message
