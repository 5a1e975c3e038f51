"""The attribution rule and what the demo counts: pure, no Faust, no I/O, no clock.

The rule (shared with the Spark reference join in examples/adclick/spark/): a click is
attributed to the impression of its auction when

    impression.event_time_ms <= click.event_time_ms <= impression.event_time_ms + size_ms

The pairing itself (state, event-time expiry, either side first, replays) is
`streamapp.joins.WindowedJoin`'s. It is asked for a wider window than the rule's, by the grace
on each side, so that a click just outside its impression's window still meets the impression
and is counted *late* (or *early*) rather than *unmatched*; only the rule's pairs are
attributed. A click that meets no impression at all is emitted alone by the left join once the
impressions clock has passed it by the grace: it is *unmatched*.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from examples.adclick.model import Attribution, Click, Impression
from streamapp.joins import JoinWindow, Outcome, Side


class Verdict(enum.Enum):
    """What became of a click (or a record): the counters' names."""

    JOINED = "joined"
    LATE = "late"  # after its impression's window closed
    EARLY = "early"  # event time before its impression's (clock skew at the source)
    UNMATCHED = "unmatched"  # no impression of its auction within the join's reach
    DUPLICATE_CLICK = "duplicate_click"  # a click id seen again while its first is held
    DUPLICATE_IMPRESSION = "duplicate_impression"  # a second impression of an auction
    OUT_OF_ORDER = "out_of_order"  # more than grace behind its topic partition: not joined
    DEAD_LETTER = "dead_letter"  # undecodable: sent to the dead-letter topic


@dataclass(frozen=True)
class AttributionWindow:
    size_ms: int
    grace_ms: int

    def __post_init__(self) -> None:
        if self.size_ms < 0 or self.grace_ms < 0:
            raise ValueError(f"window size and grace must be >= 0, got {self}")

    def classify(self, impression_time_ms: int, click_time_ms: int) -> Verdict:
        if click_time_ms < impression_time_ms:
            return Verdict.EARLY
        if click_time_ms > impression_time_ms + self.size_ms:
            return Verdict.LATE
        return Verdict.JOINED

    def join_window(self) -> JoinWindow:
        """The join's window, clicks on the left: the rule's, widened by the grace both ways."""
        return JoinWindow(
            before_ms=self.size_ms + self.grace_ms,  # impression up to size + grace before
            after_ms=self.grace_ms,  # or up to grace after the click
            grace_ms=self.grace_ms,
        )


def judge(window: AttributionWindow, click: Click, impression: Impression | None) -> Verdict:
    """The verdict on one output of the left join: a click with its impression, or alone."""
    if impression is None:
        return Verdict.UNMATCHED
    return window.classify(impression.event_time_ms, click.event_time_ms)


def attribute(impression: Impression, click: Click) -> Attribution:
    return Attribution.of(impression, click)


def counted(side: Side, outcome: Outcome) -> Verdict | None:
    """What a record's handling by the join counts as, if anything (clicks are the left side).

    Accepted records and replays are counted by their pairs (`judge`), skipped replays were
    counted the first time.
    """
    if outcome is Outcome.DUPLICATE:
        return Verdict.DUPLICATE_CLICK if side is Side.LEFT else Verdict.DUPLICATE_IMPRESSION
    if outcome is Outcome.UNDECODABLE:
        return Verdict.DEAD_LETTER
    if outcome is Outcome.LATE:
        return Verdict.OUT_OF_ORDER
    return None
