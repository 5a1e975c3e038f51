"""The rogue-member tests' app: counts events per key in a changelog table, on two workers.

Its own app id (consumer group) and topics, so that the stray members these tests add to its
group touch no other test's group.
"""

from __future__ import annotations

from tests.integration.apps.counting import QUICK_REBALANCES, counting_app

APP_ID = "it-rogue"
PARTITIONS = 4
TOPIC = f"{APP_ID}-events"
CHANGELOG = f"{APP_ID}-counts-changelog"
#: Faust's own topic, which every worker subscribes to (a stateless task of the plan).
LEADER_TOPIC = f"{APP_ID}-__assignor-__leader"

app = counting_app(
    APP_ID,
    PARTITIONS,
    # Far below a partition's changelog once the tests have produced (about 100 keys a partition,
    # a changelog record each at least), so that a member without local state is not caught
    # up, and gets a warmup, not the task.
    acceptable_recovery_lag=20,
    probing_rebalance_interval_s=5.0,
    **QUICK_REBALANCES,
)
