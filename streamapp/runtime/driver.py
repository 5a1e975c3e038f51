"""streamapp's Kafka driver, which Faust loads through its ``faust.transports`` entry point.

``streamapp.App`` names its brokers ``streamapp://HOST:PORT`` (a ``kafka://`` URL given to it is
read as the same broker), and Faust creates the app's consumer, producer, transaction manager,
conductor and fetcher from this transport:

- the consumer is streamapp's (`consumer.Consumer`), whose fetch loop (`loop.FetchLoop`) owns
  the aiokafka consumer;
- the producer is streamapp's (`producer.app_producer.AppProducer`), which owns the worker's
  aiokafka producers (and under exactly_once one per transaction);
- the conductor is Faust's, unchanged: it decodes each record the loop hands it and puts it in
  the queues of the streams that read its topic;
- the fetcher is the service Faust stops as a worker stops: stopping it ends the fetch loop.
"""

from __future__ import annotations

from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import AppT
from mode import Service
from yarl import URL

from streamapp.runtime.consumer import Consumer
from streamapp.runtime.producer.app_producer import AppProducer
from streamapp.sending import sends

#: The URL scheme of brokers served by this driver (the entry point's name).
SCHEME = "streamapp"


def driver_urls(urls: list[URL]) -> list[URL]:
    """``urls`` with the scheme of this driver (a ``kafka://`` URL is the same broker)."""
    return [url.with_scheme(SCHEME) for url in urls]


class Fetcher(Service):
    """The service Faust stops as a worker stops (``app._fetcher``): it ends the fetch loop."""

    def __init__(self, app: AppT, **kwargs: Any) -> None:
        self.app = app
        super().__init__(**kwargs)

    async def on_stop(self) -> None:
        consumer = self.app.consumer
        if isinstance(consumer, Consumer):
            await consumer.fetch_loop.stop_fetching()


class Transport(faust_aiokafka.Transport):
    """The transport of ``streamapp://`` brokers (see the module)."""

    Consumer = Consumer
    Producer = AppProducer
    TransactionManager = sends.TransactionManager
    Fetcher = Fetcher

    driver_version = f"streamapp (aiokafka {aiokafka.__version__})"
    default_port = 9092
