"""What a worker's log says at INFO: ready, rebalanced, recovering, resumed, and every problem.

Faust, mode and aiokafka log each step of their machinery at INFO: every service's
``Starting...`` and ``Stopping...``, tables of subscribed topics and partition sets, each join
and sync of the group. aiokafka logs a normal rebalance as a WARNING (``Heartbeat failed for
group ... because it is rebalancing``), and a commit the group refused while it rebalances as
an ERROR.

`install` demotes those records to DEBUG, in this one place, as they are made (a log record
factory): a handler at INFO drops them, ``-l debug`` shows them all as before. Nothing else
changes level: any other warning or error of those libraries, and streamapp's own lines
(``planned generation``, ``restoring actives``, ``processing resumed``), stay as they were, and
so do ``Worker ready`` and the worker's own start and stop. `CHATTER` lists what is
demoted.

Some lines are chatter only about some topics: those a line of streamapp's own explains
(`explained_topics`, a table's changelog, which `streamapp.changelog_watch` names in one
WARNING with what to do). aiokafka says "Topic ... not found in cluster metadata" at ERROR at
each metadata answer without the topic, and its producer, while it holds a record for a
partition that is gone, asks again every ``retry_backoff_ms``
(`streamapp.runtime.producer.refresh_spacing`; aiokafka alone asks at once: one to two thousand
lines a second, which buried the watch's line).
`TOPIC_CHATTER` lists those lines; about any other topic (a source topic deleted, where
aiokafka's line is the only word) they stay as they were.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

#: Messages demoted to DEBUG, by the start of the logger's name. A message is matched on its
#: unformatted text (``record.msg``), which for a mode service starts with ``[^--Name]: ``.
CHATTER: dict[str, tuple[str, ...]] = {
    "aiokafka": (
        r"Updating subscribed topics to",
        r"Subscribed to topic",
        r"Discovered coordinator",
        r"Revoking previously assigned partitions",
        r"\(Re-\)joining group",
        r"Joined group",
        r"Elected group leader",
        r"Successfully synced group",
        r"Setting newly assigned partitions",
        r"Heartbeat failed for group %s because it is rebalancing",
        r"LeaveGroup request succeeded",
        # At ERROR for a commit refused while the group rebalances (unknown member, illegal
        # generation, rebalance in progress): routine under the cooperative protocol, whose
        # members process on through every join. streamapp says it at INFO and sends the
        # offsets again (`streamapp.runtime.commits`).
        r"OffsetCommit failed for group %s due to group error",
    ),
    # Faust's services and streamapp's own (streamapp.runtime).
    "": (
        r"\[\^-*Conductor\]: Waiting for",
        r"\[\^-*Producer\]: (Creating topic|Topic .* created)",
        r"\[\^-*App\]: (Wait for streams|Flush producer buffer)",
        r"\[\^Worker\]: (Ready|Gathering|Closing event loop)",
        # Every service's lifecycle, under whichever module's logger it runs; the worker's
        # own "[^Worker]: Starting..." and "Stopping..." stay.
        r"\[\^-+.*?\]: (Starting|Stopping|Cleanup)",
    ),
}


#: Messages demoted to DEBUG where their first argument is a topic in `explained_topics`, by
#: the logger's name: the unformatted text (``record.msg``), whole.
TOPIC_CHATTER: dict[str, tuple[str, ...]] = {
    "aiokafka.cluster": ("Topic %s not found in cluster metadata",),
}

#: The topics a line of streamapp's own explains while they are wrong (`explain_topics`).
_explained: set[str] = set()


def explain_topics(topics: Iterable[str]) -> None:
    """Say that streamapp explains ``topics`` itself while they are missing: aiokafka's
    `TOPIC_CHATTER` about them goes to DEBUG from now on, in this process."""
    _explained.update(topics)


def is_topic_chatter(name: str, message: str, args: object) -> bool:
    return (
        message in TOPIC_CHATTER.get(name, ())
        and isinstance(args, tuple)
        and bool(args)
        and args[0] in _explained
    )


def _matcher(chatter: dict[str, tuple[str, ...]]) -> Callable[[str, str], bool]:
    compiled = [
        (prefix, re.compile("|".join(f"(?:{p})" for p in ps))) for prefix, ps in chatter.items()
    ]

    def is_chatter(name: str, message: str) -> bool:
        return any(
            (not prefix or name == prefix or name.startswith(prefix + "."))
            and pattern.match(message) is not None
            for prefix, pattern in compiled
        )

    return is_chatter


is_chatter = _matcher(CHATTER)


def demote(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` at DEBUG if it is chatter (see `CHATTER`, `TOPIC_CHATTER`), else unchanged."""
    if (
        record.levelno > logging.DEBUG
        and isinstance(record.msg, str)
        and (
            is_chatter(record.name, record.msg.lstrip())
            or is_topic_chatter(record.name, record.msg, record.args)
        )
    ):
        record.levelno = logging.DEBUG
        record.levelname = logging.getLevelName(logging.DEBUG)
    return record


def install() -> None:
    """Demote chatter in every record made from now on in this process (idempotent)."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "streamapp_quiet", False):
        return

    def quiet_factory(*args: object, **kwargs: object) -> logging.LogRecord:
        return demote(factory(*args, **kwargs))

    quiet_factory.streamapp_quiet = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(quiet_factory)
