"""The names Faust gives its own topics, as every member subscribes to them.

Faust subscribes each worker to ``<app id>-__assignor-__leader``, a one-partition topic that
holds no records: machinery, not work. The plan places it like any other topic (it is a group
of its own); the views made for people (worker log lines, ``streamapp group``'s table, the
worker's page) leave it out, and the JSON made for tools keeps it.
"""

from __future__ import annotations

#: How the name of Faust's leader topic ends.
LEADER_TOPIC_SUFFIX = "-__assignor-__leader"


def is_leader_topic(topic: str) -> bool:
    return topic.endswith(LEADER_TOPIC_SUFFIX)
