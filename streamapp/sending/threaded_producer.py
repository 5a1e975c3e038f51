"""Faust's threaded producer (``producer_threaded``) beside streamapp's app producer.

With ``producer_threaded`` Faust's producer hands the records of ``send_soon`` to a producer
running in a thread of its own: its aiokafka driver's ``ThreadedProducer``, which builds
aiokafka's ``AIOKafkaProducer`` from the settings of the driver's producer. The app's producer
is streamapp's (`streamapp.runtime.producer.app_producer.AppProducer`), so the thread's
aiokafka producer is built from that one's settings (`AppProducer.client_options`) instead;
everything else is Faust's thread. It builds aiokafka's own producer, not streamapp's: a
threaded producer runs no transaction, and its records take Faust's path.

Faust private name this relies on (checked at import, `streamapp.private_names.PRIVATE_NAMES`):
``ThreadedProducer._new_producer`` (overridden). Delete when Faust's threaded producer takes
its aiokafka settings from a public method of the producer it is made for.
Tests: tests/unit/streamapp/runtime/producer/test_app_producer.py.
"""

from __future__ import annotations

from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import AppT

# The Faust private names this module uses are checked as it is imported.
import streamapp.private_names  # noqa: F401


class ThreadedProducer(faust_aiokafka.ThreadedProducer):
    """Faust's threaded producer, whose aiokafka producer has the settings of ``producer``
    (streamapp's app producer)."""

    def __init__(self, producer: Any, *, app: AppT, **kwargs: Any) -> None:
        super().__init__(default_producer=producer, app=app, **kwargs)
        self.settings_source = producer

    def _new_producer(self, transactional_id: str | None = None) -> aiokafka.AIOKafkaProducer:
        # Called in the thread's own event loop (as it starts): aiokafka takes the running one.
        options = self.settings_source.client_options(transactional_id)
        return aiokafka.AIOKafkaProducer(**options)
