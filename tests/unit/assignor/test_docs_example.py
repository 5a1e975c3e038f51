"""The example of docs/assignment-rules.md does what the page says it does."""

from __future__ import annotations

import json
import re

from assignor import plan
from tests.paths import DOCS

PAGE = DOCS / "assignment-rules.md"


def test_the_restarted_member_gets_its_caught_up_tasks_back_and_standbys_cross() -> None:
    block = re.search(r"```json\n(.*?)```", PAGE.read_text(), re.S)
    assert block is not None, "the page lost its example"
    result = plan(json.loads(block.group(1)))
    members = result["members"]
    assert members["m-a"]["active"]["clicks"] == [0, 1]
    assert members["m-b"]["active"]["clicks"] == [2, 3]
    assert members["m-a"]["standby"]["app-counts-changelog"] == [2, 3]
    assert members["m-b"]["standby"]["app-counts-changelog"] == [0, 1]
    assert result["followup_rebalance"] is False
