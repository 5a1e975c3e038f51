"""The broker-failure test's app: the counting app under its own app id and processing
guarantee (from the environment), its topics and changelog replicated 3 times, as on a
production cluster."""

from __future__ import annotations

import os

from tests.integration.apps.counting import counting_app

APP_ID_ENV = "IT_FAILOVER_APP_ID"
GUARANTEE_ENV = "IT_FAILOVER_GUARANTEE"
PARTITIONS = 4
REPLICAS = 3

app = counting_app(
    os.environ.get(APP_ID_ENV, "it-failover"),
    PARTITIONS,
    processing_guarantee=os.environ.get(GUARANTEE_ENV, "at_least_once"),
    topic_replication_factor=REPLICAS,
)
