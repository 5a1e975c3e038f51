"""The app's broker: as ``--broker`` gives it, as a Kafka client takes it, as a message names it.

``--broker`` becomes Faust's ``BROKER_URL`` before the app is imported (Faust reads it when the
app's settings are first used); the checks before a worker starts (`streamapp.preflight`) and
the worker's own clients read the app's broker back as bootstrap servers.
"""

from __future__ import annotations

import os

import faust

#: The port Faust's aiokafka driver uses when a broker URL names none.
KAFKA_DEFAULT_PORT = 9092


def broker_url(address: str) -> str:
    return address if "://" in address else f"kafka://{address}"


def use_broker_option(broker: str | None) -> None:
    """Make ``--broker`` the app's broker; before the app is imported, or Faust ignores it."""
    if broker:
        os.environ["BROKER_URL"] = broker_url(broker)


def app_bootstrap(app: faust.App) -> str:
    """The app's bootstrap servers as a Kafka client takes them (``host:port,...``)."""
    from faust.transport.drivers.aiokafka import server_list

    return ",".join(server_list(app.conf.broker, KAFKA_DEFAULT_PORT))


def broker_option(app: faust.App, given: str | None) -> str:
    """How a message names the broker: the option as typed, or the app's default."""
    if given:
        return f"--broker {given}"
    shown = ";".join(f"{u.host}:{u.port or KAFKA_DEFAULT_PORT}" for u in app.conf.broker)
    return f"--broker {shown} (the app's default)"
