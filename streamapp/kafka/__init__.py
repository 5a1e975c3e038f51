"""A real, local Apache Kafka broker (KRaft, loopback only) for development, tests and the demo.

The jars of a Kafka release (4.4.0 unless ``--kafka-version`` or ``STREAMAPP_KAFKA_VERSION``
picks another, e.g. 3.9.1) are resolved through Maven Central with ``mvn`` into a cache
(`release`); `broker.LocalKafka` formats storage, starts one broker+controller bound to
127.0.0.1 and waits until it answers a metadata request. `cluster.LocalKafkaCluster` starts
3 to 5 of them as one cluster, whose nodes can be killed and restarted.
"""

from streamapp.kafka.broker import BrokerError, LocalKafka, broker_status
from streamapp.kafka.cluster import LocalKafkaCluster
from streamapp.kafka.release import (
    DEFAULT_KAFKA_VERSION,
    KAFKA_VERSION_ENV,
    TESTED_KAFKA_VERSIONS,
    kafka_release,
    resolve_kafka_jars,
)

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "KAFKA_VERSION_ENV",
    "TESTED_KAFKA_VERSIONS",
    "BrokerError",
    "LocalKafka",
    "LocalKafkaCluster",
    "broker_status",
    "kafka_release",
    "resolve_kafka_jars",
]
