"""A real, local Apache Kafka broker (KRaft, loopback only) for development, tests and the demo.

The jars of a pinned Kafka release are resolved through Maven Central with ``mvn`` into a cache
(`release`); `broker.LocalKafka` formats storage, starts one broker+controller bound to
127.0.0.1 and waits until it answers a metadata request.
"""

from streamapp.kafka.broker import BrokerError, LocalKafka, broker_status
from streamapp.kafka.release import KAFKA_VERSION, resolve_kafka_jars

__all__ = ["KAFKA_VERSION", "BrokerError", "LocalKafka", "broker_status", "resolve_kafka_jars"]
