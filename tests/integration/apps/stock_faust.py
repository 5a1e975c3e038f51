"""The rebalance tests' app id under stock Faust (its own assignor): an outsider to refuse."""

from __future__ import annotations

import faust

app = faust.App(
    "it-rebalance",
    store="rocksdb://",
    table_standby_replicas=1,
    # Once refused it is killed; the group notices after the session timeout.
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
)
