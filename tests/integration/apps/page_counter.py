"""The counting app under the app id of the group page's browser test (test_group_page)."""

from __future__ import annotations

from tests.integration.apps.counting import counting_app

APP_ID = "it-page"
PARTITIONS = 6

app = counting_app(APP_ID, PARTITIONS)
