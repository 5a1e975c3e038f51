"""streamapp's Kafka producer: aiokafka's, with what a worker needs of it.

- `client.WorkerProducer`, a subclass of aiokafka's ``AIOKafkaProducer``: a send to a partition
  its metadata does not have waits for it (`partition_wait`), and its sender's metadata
  refreshes are a backoff apart (`refresh_spacing`);
- `batch_append`, a batch's changelog and output records appended to the producer's open
  batches without a future each.

This is the one package of streamapp allowed aiokafka's internals on the producer side: the
sender a producer builds in its constructor (``_sender``) has no public way to space its
refreshes, and aiokafka has no public call that appends to an open batch. Nothing of aiokafka's
is replaced: its classes, and every other producer in the process, behave as aiokafka documents.

Every aiokafka internal these modules rely on is listed in `PRIVATE_NAMES` and checked as this
package is imported, against the aiokafka releases in `AIOKAFKA_RELEASES`
(`streamapp.runtime.library_check`). A unit test reads these modules for every aiokafka private
name they use.
"""

from __future__ import annotations

from streamapp.runtime import library_check

#: The aiokafka releases this package was checked against: ``>=0.14,<0.15``.
AIOKAFKA_RELEASES: library_check.Ranges = {"aiokafka": ((0, 14), (0, 15))}

#: ``module:Class`` -> the aiokafka internals this package reads or sets on it (or on an
#: instance of it).
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "aiokafka.producer.producer:AIOKafkaProducer": (
        "_sender",  # refresh_spacing: its sender's refreshes, spaced
        "_message_accumulator",  # batch_append: a batch's records, no futures; client: flush
        "_txn_manager",  # batch_append: what send checks, checked as send does
        "_key_serializer",
        "_value_serializer",
        "_max_request_size",
        "_partition",  # batch_append: an output record's partition, as send picks it
    ),
    "aiokafka.producer.message_accumulator:MessageAccumulator": (
        "_batches",  # batch_append: a partition's open batch, as add_message finds it
        "_closed",  # batch_append: what add_message checks
        "_exception",
    ),
    "aiokafka.producer.message_accumulator:MessageBatch": (
        "_builder",  # batch_append: a record appended without a future
    ),
    "aiokafka.producer.sender:Sender": (
        "_retry_backoff",  # refresh_spacing: the backoff between its refreshes
    ),
}

#: ``module:Class`` (its constructor) or ``module:Class.method`` -> the keywords this package
#: passes it, or that its override takes.
KEYWORDS: dict[str, tuple[str, ...]] = {
    "aiokafka.producer.producer:AIOKafkaProducer.send": (
        "topic",
        "value",
        "key",
        "partition",
        "timestamp_ms",
        "headers",
    ),
    "aiokafka.producer.sender:Sender": ("client",),  # refresh_spacing: the client it asks
}

library_check.check(
    "streamapp's producer (streamapp.runtime.producer)",
    PRIVATE_NAMES,
    AIOKAFKA_RELEASES,
    keywords=KEYWORDS,
)
