"""The worker's Kafka clients' settings: its consumer's, and the client id of every client.

Faust's aiokafka driver builds aiokafka's ``AIOKafkaConsumer`` for its consumer thread. A
worker's consumer is streamapp's instead, `streamapp.runtime.group.consumer.WorkerConsumer`,
built here with the arguments Faust's driver gives its own (`worker_consumer_options`), except:

- it always runs the app's assignor (Faust hands aiokafka the app's assignor only when the app
  has changelog tables or standby replicas, and aiokafka's round robin otherwise; a streamapp
  group must speak one protocol whatever each app defines: a worker with round robin would be
  refused by the group, or would ignore co-partitioning and stickiness);
- it is named by the worker's client id (`worker_client_id`), as the worker's producers are
  (`streamapp.runtime.producer.app_producer`), so Kafka's tools (``kafka-consumer-groups
  --describe --members``) and the brokers' logs name each worker, where Faust names every
  worker ``faust-<version>``.

aiokafka's classes are left as they are. The consumer is built by `streamapp.runtime.clients`
for the fetch loop. No private name of Faust's is used here.
Tests: tests/unit/streamapp/runtime/test_clients.py,
tests/unit/streamapp/runtime/test_stock_classes.py.
"""

from __future__ import annotations

from typing import Any

import faust
from faust.exceptions import ImproperlyConfigured
from faust.transport.drivers import aiokafka as faust_aiokafka

from streamapp.runtime.group.consumer import WorkerConsumer

#: Faust's default ``broker_client_id``: an app that sets another one keeps its own.
FAUST_CLIENT_ID = f"faust-{faust.__version__}"


def worker_client_id(app: Any) -> str:
    """The client id of the worker's Kafka clients: the app's own ``broker_client_id`` if it
    set one, else the worker's client id (``--client-id``, or the one kept in its data dir)."""
    configured = str(app.conf.broker_client_id)
    if configured != FAUST_CLIENT_ID:
        return configured
    settings = getattr(app, "streamapp_settings", None)
    if settings is not None and settings.client_id:
        return str(settings.client_id)
    # Not started by `streamapp worker`: streamapp's assignor keeps one in the data dir.
    client_id = getattr(app.assignor, "client_id", None)
    return str(client_id) if client_id else configured


def worker_consumer_options(app: Any, transport: Any, *, read_committed: bool) -> dict[str, Any]:
    """aiokafka's keyword arguments for the worker's consumer: Faust's, with the app's assignor
    and the worker's client id."""
    conf = app.conf
    request_timeout = conf.broker_request_timeout
    session_timeout = conf.broker_session_timeout
    if session_timeout > request_timeout:
        raise ImproperlyConfigured(
            f"Setting broker_session_timeout={session_timeout} "
            f"cannot be greater than "
            f"broker_request_timeout={request_timeout}"
        )
    max_poll_interval = conf.broker_max_poll_interval or 0
    return {
        "client_id": worker_client_id(app),
        "group_id": conf.id,
        "group_instance_id": conf.consumer_group_instance_id,
        "bootstrap_servers": faust_aiokafka.server_list(transport.url, transport.default_port),
        "partition_assignment_strategy": [app.assignor],
        "enable_auto_commit": False,
        "auto_offset_reset": conf.consumer_auto_offset_reset,
        "max_poll_records": conf.broker_max_poll_records,
        "max_poll_interval_ms": int(max_poll_interval * 1000.0),
        "max_partition_fetch_bytes": conf.consumer_max_fetch_size,
        "fetch_max_wait_ms": 1500,
        "request_timeout_ms": int(request_timeout * 1000.0),
        "check_crcs": conf.broker_check_crcs,
        "session_timeout_ms": int(session_timeout * 1000.0),
        "rebalance_timeout_ms": int(conf.broker_rebalance_timeout * 1000.0),
        "heartbeat_interval_ms": int(conf.broker_heartbeat_interval * 1000.0),
        "isolation_level": "read_committed" if read_committed else "read_uncommitted",
        "metadata_max_age_ms": conf.consumer_metadata_max_age_ms,
        "connections_max_idle_ms": conf.consumer_connections_max_idle_ms,
        **faust_aiokafka.credentials_to_aiokafka_auth(conf.broker_credentials, conf.ssl_context),
    }


def worker_consumer(app: Any, transport: Any, *, read_committed: bool) -> WorkerConsumer:
    """The worker's consumer, not started: a static member that leaves the group on a stop
    unless ``leave_group_on_stop`` is off (`streamapp.runtime.group.static_membership`)."""
    settings = getattr(app, "streamapp_settings", None)
    return WorkerConsumer(
        **worker_consumer_options(app, transport, read_committed=read_committed),
        leave_group_on_stop=settings.leave_group_on_stop if settings is not None else True,
    )
