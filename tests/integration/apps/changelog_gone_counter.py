"""The deleted-changelog test's app: rogue_counter's counting app under its own app id (consumer
group) and topics, since that test deletes and recreates its changelog."""

from __future__ import annotations

from tests.integration.apps.counting import QUICK_REBALANCES, counting_app

APP_ID = "it-changelog-gone"
PARTITIONS = 4
TOPIC = f"{APP_ID}-events"
CHANGELOG = f"{APP_ID}-counts-changelog"

app = counting_app(APP_ID, PARTITIONS, **QUICK_REBALANCES)
