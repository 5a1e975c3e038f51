"""A steady stream of small records on every partition of a topic, from a background thread.

``bench/rebalance.py`` measures how long a partition goes without processing during a rebalance;
that needs records arriving all the time on every partition, at a fixed rate, whatever the
benchmark's main thread is doing (it blocks on sleeps, subprocesses and HTTP polls).
"""

from __future__ import annotations

import asyncio
import threading
import time

from aiokafka import AIOKafkaProducer


class Ticker:
    """Sends ``rate`` records per second to each of ``partitions`` partitions of ``topic``.

    Paced against the clock from the start (a late round is sent at once, not skipped), so a
    busy machine delays ticks but does not thin them out.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be above 0, got {rate}")
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def interval(self) -> float:
        """Seconds between two records of one partition."""
        return 1.0 / self.rate

    def start(self) -> Ticker:
        self._thread = threading.Thread(target=self._run, name="ticker", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.error is not None:
            raise RuntimeError(f"the ticker failed: {self.error!r}") from self.error

    def _run(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as exc:  # reported by stop(): the main thread owns the outcome
            self.error = exc

    async def _produce(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=2, acks=1)
        await producer.start()
        try:
            started = time.monotonic()
            rounds = 0
            while not self._stop.is_set():
                delay = started + rounds * self.interval - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                for partition in range(self.partitions):
                    await producer.send(self.topic, b"", key=b"tick", partition=partition)
                self.sent += self.partitions
                rounds += 1
            await producer.flush()
        finally:
            await producer.stop()
