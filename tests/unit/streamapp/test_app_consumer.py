"""A streamapp.App finds its consumer once Faust has created it, and never creates one itself:
its clean stop and its flow control ask for it (``app.consumer`` would create one)."""

from __future__ import annotations

from pathlib import Path

from streamapp import App
from streamapp.runtime.consumer import Consumer


def _app(tmp_path: Path) -> App:
    return App("t-app-consumer", broker="kafka://127.0.0.1:1", datadir=str(tmp_path))


def test_the_app_knows_its_consumer_once_faust_created_it(tmp_path: Path) -> None:
    app = _app(tmp_path)
    assert app.streamapp_consumer is None
    consumer = app.consumer
    assert isinstance(consumer, Consumer)
    assert app.streamapp_consumer is consumer


async def test_a_stop_without_a_consumer_creates_none(tmp_path: Path) -> None:
    app = _app(tmp_path)
    await app.on_shutdown()
    assert app.streamapp_consumer is None
