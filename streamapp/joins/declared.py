"""The topics a join or an aggregate writes to, as it declares them: for `streamapp topics create`.

Faust knows the topics an app's agents consume (its source topics) and those it creates itself
(changelogs); the topics a join or an aggregate only writes to (its output topic, the topic
its late records go to) are known to the join or aggregate alone. Each one notes its own here
when it is declared, and `streamapp topics create` creates them with the sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from weakref import WeakKeyDictionary

from faust.types import AppT, TopicT

__all__ = [
    "WrittenTopic",
    "check_batch_records",
    "note_dead_letters",
    "note_output",
    "note_written_topic",
    "source_partitions",
    "written_topics",
]


@dataclass(frozen=True)
class WrittenTopic:
    """A topic a join or an aggregate writes to.

    ``partitions``: the count to create it with; ``replicas``: as declared on the topic, or None
    for the app's ``topic_replication_factor``; ``why``: what it is, for the command's output
    (``"output of join orders-payments"``).
    """

    name: str
    partitions: int
    replicas: int | None
    why: str


_written: WeakKeyDictionary[AppT, dict[str, WrittenTopic]] = WeakKeyDictionary()


def note_written_topic(app: AppT, topic: WrittenTopic) -> None:
    """Note that a join or an aggregate of ``app`` writes to ``topic``; the first note of a name
    wins (two joins writing one topic need it once)."""
    _written.setdefault(app, {}).setdefault(topic.name, topic)


def written_topics(app: AppT) -> list[WrittenTopic]:
    """The topics the joins and aggregates declared on ``app`` write to, sorted by name."""
    return sorted(_written.get(app, {}).values(), key=lambda t: t.name)


def check_batch_records(owner: str, batch_records: int | None) -> None:
    """Raise ValueError unless ``batch_records`` is None or at least 1."""
    if batch_records is not None and batch_records < 1:
        raise ValueError(f"{owner}: batch_records must be at least 1, not {batch_records}")


def source_partitions(app: AppT, owner: str, partitions: int | None, topics: list[TopicT]) -> int:
    """The partition count of a join's or an aggregate's sources (and so of its tables).

    ``partitions`` when given; otherwise the count the topics declare (``partitions=``), which
    must be one, or the app's ``topic_partitions`` when none declares one. Raises ValueError
    when the topics declare different counts and ``partitions`` does not say which.
    """
    if partitions is not None:
        if partitions < 1:
            raise ValueError(f"{owner}: partitions must be at least 1, not {partitions}")
        return partitions
    declared = {int(t.partitions) for t in topics if t.partitions}
    if len(declared) > 1:
        listed = ", ".join(f"{t.get_topic_name()} ({t.partitions})" for t in topics)
        raise ValueError(
            f"{owner}: its sources declare different partition counts ({listed}); "
            "co-partitioned sources need one: declare them alike, or pass partitions="
        )
    return declared.pop() if declared else int(app.conf.topic_partitions)


def note_output(app: AppT, owner: str, output: object, partitions: int) -> None:
    """Note an output that is a topic: created with its declared count, or ``partitions``."""
    if isinstance(output, TopicT) and not output.pattern:
        for name in output.topics:
            note_written_topic(
                app,
                WrittenTopic(
                    name,
                    int(output.partitions or partitions),
                    output.replicas,
                    f"output of {owner}",
                ),
            )


def note_dead_letters(app: AppT, owner: str, name: str | None) -> None:
    """Note the topic ``owner``'s late records go to, if any: one partition, as the app's
    dead-letter topic."""
    if name is not None:
        note_written_topic(app, WrittenTopic(name, 1, None, f"late records of {owner}"))
