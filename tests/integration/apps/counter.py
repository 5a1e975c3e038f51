"""A tiny streamapp app for integration tests: counts events per key in a changelog table."""

from __future__ import annotations

from tests.integration.apps.counting import counting_app

PARTITIONS = 4

app = counting_app("it-counter", PARTITIONS)
