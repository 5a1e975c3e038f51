"""The revocation-commit test's app: counts events per key, and never commits on a timer.

Its periodic commit is an hour apart, so only the commit a revocation makes can carry what a
worker processed to the next owner of its partitions; without it, the next owner counts every
event again.
"""

from __future__ import annotations

import os

from tests.integration.apps.counting import QUICK_REBALANCES, counting_app

#: One per protocol the test runs under (``REVOCATION_APP_ID``): its own group and topics.
APP_ID = os.environ.get("REVOCATION_APP_ID", "it-revocation")
PARTITIONS = 4
TOPIC = f"{APP_ID}-events"

app = counting_app(APP_ID, PARTITIONS, **{**QUICK_REBALANCES, "broker_commit_interval": 3600.0})
