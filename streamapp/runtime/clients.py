"""The aiokafka clients of a worker, built from the app's settings.

One consumer in the app's group (`streamapp.runtime.group.consumer.WorkerConsumer`: streamapp's
group protocol, its partitions assigned by streamapp's assignor whatever the app defines), and
the settings every client of the worker shares: the brokers, the worker's client id (so that
Kafka's own tools and broker logs name each worker), authentication.
"""

from __future__ import annotations

from typing import Any

from faust.types import AppT

from streamapp.runtime.group.consumer import WorkerConsumer
from streamapp.runtime.worker_clients import (
    worker_client_id,
    worker_consumer_options,
)
from streamapp.runtime.worker_clients import worker_consumer as faust_worker_consumer

#: aiokafka's wait for records in a fetch request, Faust's value (`worker_consumer_options`).
FETCH_MAX_WAIT_MS = 1500


def isolation_level(app: AppT) -> str:
    return "read_committed" if app.in_transaction else "read_uncommitted"


def common_settings(app: AppT, transport: Any) -> dict[str, Any]:
    """What every client of the worker is built with: brokers, client id, authentication."""
    options = worker_consumer_options(app, transport, read_committed=bool(app.in_transaction))
    keys = ("bootstrap_servers", "request_timeout_ms", "client_id", "security_protocol")
    settings = {key: options[key] for key in keys if key in options}
    for key, value in options.items():
        if key.startswith(("sasl_", "ssl_")):
            settings[key] = value
    return settings


def client_id(app: AppT) -> str:
    return worker_client_id(app)


def worker_consumer(app: AppT, transport: Any) -> WorkerConsumer:
    """The worker's consumer in the app's group (not started)."""
    return faust_worker_consumer(app, transport, read_committed=bool(app.in_transaction))


def offsets_reader(app: AppT, transport: Any) -> WorkerConsumer:
    """A consumer in no group at the worker consumer's isolation level, for offsets."""
    return WorkerConsumer(
        **common_settings(app, transport),
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation_level(app),
        role="offsets reader",
    )


def generation(client: WorkerConsumer) -> int:
    """The group generation ``client`` last joined (-1: none)."""
    return client.membership()[1]
