"""The aiokafka clients of a worker, built from the app's settings.

One consumer in the app's group (its partitions assigned by streamapp's assignor, whatever the
app defines), and the settings every client of the worker shares: the brokers, the worker's
client id (so that Kafka's own tools and broker logs name each worker), authentication.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer
from faust.exceptions import ImproperlyConfigured
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth, server_list
from faust.types import AppT

from streamapp.faust_compat import static_membership
from streamapp.faust_compat.access import (
    aiokafka_membership,
    aiokafka_refresh_metadata,
    aiokafka_request_rejoin,
)

#: Faust's wait for records in a fetch request (it is no Faust setting).
FETCH_MAX_WAIT_MS = 1500
#: Kafka's default port, for a broker URL without one.
DEFAULT_PORT = 9092


def client_id(app: AppT) -> str:
    """The worker's client id: streamapp's setting, else Faust's ``broker_client_id``."""
    settings = getattr(app, "streamapp_settings", None)
    found = getattr(settings, "client_id", None)
    return str(found or app.conf.broker_client_id)


def bootstrap_servers(transport: Any) -> list[str]:
    return list(server_list(transport.url, DEFAULT_PORT))


def common_settings(app: AppT, transport: Any) -> dict[str, Any]:
    conf = app.conf
    return {
        "client_id": client_id(app),
        "bootstrap_servers": bootstrap_servers(transport),
        "request_timeout_ms": int(conf.broker_request_timeout * 1000.0),
        **credentials_to_aiokafka_auth(conf.broker_credentials, conf.ssl_context),
    }


def isolation_level(app: AppT) -> str:
    return "read_committed" if app.in_transaction else "read_uncommitted"


def worker_consumer(app: AppT, transport: Any) -> AIOKafkaConsumer:
    """The worker's consumer in the app's group, with streamapp's assignor."""
    conf = app.conf
    session_timeout = conf.broker_session_timeout
    if session_timeout > conf.broker_request_timeout:
        raise ImproperlyConfigured(
            f"Setting broker_session_timeout={session_timeout} cannot be greater than "
            f"broker_request_timeout={conf.broker_request_timeout}"
        )
    consumer = AIOKafkaConsumer(
        **common_settings(app, transport),
        group_id=conf.id,
        group_instance_id=conf.consumer_group_instance_id,
        partition_assignment_strategy=[app.assignor],
        enable_auto_commit=False,
        auto_offset_reset=conf.consumer_auto_offset_reset,
        max_poll_records=conf.broker_max_poll_records,
        max_poll_interval_ms=int((conf.broker_max_poll_interval or 0) * 1000.0),
        max_partition_fetch_bytes=conf.consumer_max_fetch_size,
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        check_crcs=conf.broker_check_crcs,
        session_timeout_ms=int(session_timeout * 1000.0),
        rebalance_timeout_ms=int(conf.broker_rebalance_timeout * 1000.0),
        heartbeat_interval_ms=int(conf.broker_heartbeat_interval * 1000.0),
        isolation_level=isolation_level(app),
        metadata_max_age_ms=conf.consumer_metadata_max_age_ms,
        connections_max_idle_ms=conf.consumer_connections_max_idle_ms,
    )
    instance_id = conf.consumer_group_instance_id
    if instance_id is not None:  # a static member: it leaves on a stop, stops once fenced
        settings = getattr(app, "streamapp_settings", None)
        static_membership.install(
            consumer,
            conf.id,
            instance_id,
            leave_on_stop=bool(getattr(settings, "leave_group_on_stop", True)),
        )
    return consumer


def generation(client: AIOKafkaConsumer) -> int:
    """The group generation ``client`` last joined (-1: none)."""
    return aiokafka_membership(client)[1]


def membership(client: AIOKafkaConsumer) -> tuple[str | None, int]:
    """``client``'s member id and generation in its group (None, -1: not a member)."""
    return aiokafka_membership(client)


def request_rejoin(client: AIOKafkaConsumer) -> None:
    aiokafka_request_rejoin(client)


async def refresh_metadata(client: AIOKafkaConsumer) -> None:
    await aiokafka_refresh_metadata(client)
