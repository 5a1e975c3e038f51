"""streamapp replaces nothing of aiokafka's: after a streamapp.App built its transport, consumer
and producer (their clients built and started as far as no broker lets them), aiokafka's classes
hold exactly what they held before streamapp was imported.

Run in a fresh interpreter: the test process imported streamapp long before this test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.paths import REPO_ROOT

#: The classes a worker's Kafka clients build on, and the modules that name them.
CLASSES = {
    "aiokafka.consumer.consumer": ["AIOKafkaConsumer"],
    "aiokafka.consumer.group_coordinator": [
        "BaseCoordinator",
        "GroupCoordinator",
        "CoordinatorGroupRebalance",
        "NoGroupCoordinator",
    ],
    "aiokafka.consumer.fetcher": ["Fetcher"],
    "aiokafka.consumer.subscription_state": ["SubscriptionState"],
    "aiokafka.producer.producer": ["AIOKafkaProducer"],
    "aiokafka.producer.sender": ["Sender"],
    "aiokafka.producer.message_accumulator": ["MessageAccumulator", "MessageBatch"],
    "aiokafka.client": ["AIOKafkaClient"],
}

SCRIPT = textwrap.dedent(
    """
    import asyncio, importlib, json, sys

    CLASSES = json.loads(sys.argv[1])
    datadir = sys.argv[2]
    assert not any(name.startswith("streamapp") for name in sys.modules)

    def snapshot():
        seen = {}
        for module_name, names in CLASSES.items():
            module = importlib.import_module(module_name)
            # The module's globals too: a class its code builds by name (GroupCoordinator).
            seen[module_name] = dict(vars(module))
            for name in names:
                seen[f"{module_name}:{name}"] = dict(vars(getattr(module, name)))
        return seen

    before = snapshot()

    import streamapp

    async def build():
        app = streamapp.App("stock-classes", broker="kafka://127.0.0.1:9", datadir=datadir)
        from streamapp.runtime import clients

        transport = app.transport
        consumer = clients.worker_consumer(app, transport)
        reader = clients.offsets_reader(app, transport)
        producer = app.producer.new_client()
        transactional = app.producer.new_client(transactional_id="stock-classes-0")
        built = [type(c).__name__ for c in (consumer, producer, transactional)]
        for client in (consumer, producer, transactional, reader):
            try:
                await asyncio.wait_for(client.start(), 10)  # no broker: as far as it gets
            except Exception:
                pass
            finally:
                await client.stop()
        return built

    built = asyncio.run(build())
    after = snapshot()
    def code(value):
        # A function, a class, or a descriptor holding one (property, staticmethod, ...):
        # not a counter aiokafka itself keeps on the class (_PRODUCER_CLIENT_ID_SEQUENCE).
        return callable(value) or hasattr(value, "__get__")

    changed = {}
    for owner, attrs in before.items():
        now = after[owner]
        added_or_gone = set(attrs) ^ set(now)
        replaced = {
            n
            for n in set(attrs) & set(now)
            if attrs[n] is not now[n] and (code(attrs[n]) or code(now[n]))
        }
        if added_or_gone | replaced:
            changed[owner] = sorted(added_or_gone | replaced)
    print(json.dumps({"built": built, "changed": changed}))
    """
)


def test_aiokafkas_classes_are_as_stock_after_streamapp_built_its_clients(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(CLASSES), str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    # The clients built are streamapp's own: a check that the script reached them.
    assert outcome["built"] == ["WorkerConsumer", "WorkerProducer", "WorkerProducer"]
    assert outcome["changed"] == {}
