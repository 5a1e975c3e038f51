"""A fetched record as Faust's streams and tables take it."""

from __future__ import annotations

from typing import Any

from aiokafka import ConsumerRecord
from faust.types import TP
from faust.types.tuples import ConsumerMessage


def consumer_message(
    tp: TP,
    record: ConsumerRecord[Any, Any],
    time_in: float | None = None,
    generation_id: int | None = None,
) -> ConsumerMessage:
    """``record`` as Faust's ``ConsumerMessage``: its timestamp in seconds, as Faust reads
    timestamps (aiokafka gives milliseconds)."""
    timestamp = record.timestamp
    return ConsumerMessage(
        record.topic,
        record.partition,
        record.offset,
        timestamp / 1000.0 if timestamp is not None else None,  # type: ignore[arg-type]
        record.timestamp_type,
        record.headers,
        record.key,
        record.value,
        record.checksum,
        record.serialized_key_size,
        record.serialized_value_size,
        tp,
        time_in=time_in,
        generation_id=generation_id,
    )
