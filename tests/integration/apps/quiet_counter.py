"""The counting app under its own id, for the worker log test (test_worker_log)."""

from __future__ import annotations

from tests.integration.apps.counting import QUICK_REBALANCES, counting_app

APP_ID = "it-quiet-log"
PARTITIONS = 4

app = counting_app(APP_ID, PARTITIONS, **QUICK_REBALANCES)
