"""The JoinGroup-error test's app: rogue_counter's counting app under its own app id (consumer
group) and topics, so the stray member that test adds touches no other test's group."""

from __future__ import annotations

from tests.integration.apps.counting import QUICK_REBALANCES, counting_app

APP_ID = "it-join-errors"
PARTITIONS = 4
TOPIC = f"{APP_ID}-events"
CHANGELOG = f"{APP_ID}-counts-changelog"
#: Faust's own topic, which every worker subscribes to (a stateless task of the plan).
LEADER_TOPIC = f"{APP_ID}-__assignor-__leader"

app = counting_app(APP_ID, PARTITIONS, **QUICK_REBALANCES)
