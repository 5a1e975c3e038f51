"""The impression/click join decisions: pure functions, no Faust, no I/O, no clock.

The rule (shared with the Spark reference join in examples/adclick/spark/):
a click is attributed to the impression of its auction when

    impression.event_time_ms <= click.event_time_ms <= impression.event_time_ms + size_ms

Records of one topic partition may arrive out of event-time order by at most
``grace_ms``, and a click may arrive before its impression. State is kept per
auction on both sides and expired by event time:

* an impression can only still be matched by clicks, so it is expired by the
  *clicks* clock of its partition (the highest click time seen) once that
  clock passes ``event_time + size + grace``;
* a pending click (arrived before any impression) can only be matched by an
  impression, so it is expired by the *impressions* clock once that passes
  ``event_time + grace``; it is then counted as unmatched.

Driving each side's expiry by the other side's clock keeps the join exact
however the two topics' consumption interleaves (after a restart one topic's
backlog may be read far ahead of the other's).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any

from examples.adclick.model import Attribution, Click, Impression


@dataclass(frozen=True)
class JoinWindow:
    size_ms: int
    grace_ms: int

    def __post_init__(self) -> None:
        if self.size_ms < 0 or self.grace_ms < 0:
            raise ValueError(f"window size and grace must be >= 0, got {self}")

    def classify(self, impression_time_ms: int, click_time_ms: int) -> Outcome:
        if click_time_ms < impression_time_ms:
            return Outcome.EARLY
        if click_time_ms > impression_time_ms + self.size_ms:
            return Outcome.LATE
        return Outcome.JOINED

    def impression_expires_after(self, impression: Impression) -> int:
        """The clicks clock value past which no click can match this impression any more."""
        return impression.event_time_ms + self.size_ms + self.grace_ms

    def pending_click_expires_after(self, click: Click) -> int:
        """The impressions clock value past which this click's impression cannot arrive any more."""
        return click.event_time_ms + self.grace_ms


class Outcome(enum.Enum):
    JOINED = "joined"
    LATE = "late"  # after its impression's window closed
    EARLY = "early"  # event time before its impression's (clock skew at the source)
    PENDING = "pending"  # no impression yet: kept until its impression comes or it expires
    DUPLICATE_CLICK = "duplicate_click"  # the same click id delivered again
    DUPLICATE_IMPRESSION = "duplicate_impression"
    UNMATCHED = "unmatched"  # expired while pending: no impression within grace


@dataclass(frozen=True)
class ImpressionState:
    """What the impressions table keeps per auction."""

    impression: Impression
    # Clicks already decided against this impression: (click id, click time, whether
    # the impression's arrival decided it, i.e. the click had been pending). A record
    # processed again (at-least-once after a crash: the state may have seen it, the output
    # topic may not) re-emits the attributions it *owns*, since their first emission may
    # never have reached the output topic; each attribution has exactly one owner record,
    # so a replay emits it once more, never twice. Under exactly_once no record is seen
    # twice: state and output commit together, and unclean local state is discarded.
    decided_clicks: tuple[tuple[str, int, bool], ...] = ()

    def decision(self, click_id: str) -> tuple[str, int, bool] | None:
        return next((d for d in self.decided_clicks if d[0] == click_id), None)

    def to_json(self) -> dict[str, Any]:
        imp = self.impression
        return {
            "auction_id": imp.auction_id,
            "campaign": imp.campaign,
            "cost_micros": imp.cost_micros,
            "event_time_ms": imp.event_time_ms,
            "decided_clicks": [[cid, t, int(by_imp)] for cid, t, by_imp in self.decided_clicks],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ImpressionState:
        return cls(
            impression=Impression(
                auction_id=obj["auction_id"],
                campaign=obj["campaign"],
                cost_micros=int(obj["cost_micros"]),
                event_time_ms=int(obj["event_time_ms"]),
            ),
            decided_clicks=tuple(
                (str(c), int(t), bool(by_imp)) for c, t, by_imp in obj.get("decided_clicks", ())
            ),
        )


def pending_to_json(pending: tuple[Click, ...]) -> list[dict[str, Any]]:
    return [
        {"click_id": c.click_id, "auction_id": c.auction_id, "event_time_ms": c.event_time_ms}
        for c in pending
    ]


def pending_from_json(items: list[dict[str, Any]] | None) -> tuple[Click, ...]:
    return tuple(
        Click(
            click_id=item["click_id"],
            auction_id=item["auction_id"],
            event_time_ms=int(item["event_time_ms"]),
        )
        for item in items or ()
    )


@dataclass(frozen=True)
class ClickDecision:
    outcome: Outcome
    attribution: Attribution | None = None
    impression_state: ImpressionState | None = None  # to store, when it changed
    pending: tuple[Click, ...] | None = None  # to store, when it changed


@dataclass(frozen=True)
class ImpressionDecision:
    impression_state: ImpressionState
    attributions: tuple[Attribution, ...] = ()
    # Every formerly pending click resolved by this impression, with its outcome.
    resolved: tuple[tuple[Click, Outcome], ...] = ()
    duplicate: bool = False


def on_click(
    window: JoinWindow,
    state: ImpressionState | None,
    pending: tuple[Click, ...],
    click: Click,
) -> ClickDecision:
    if state is None:
        if any(p.click_id == click.click_id for p in pending):
            return ClickDecision(Outcome.DUPLICATE_CLICK)
        return ClickDecision(Outcome.PENDING, pending=(*pending, click))
    outcome = window.classify(state.impression.event_time_ms, click.event_time_ms)
    attribution = Attribution.of(state.impression, click) if outcome is Outcome.JOINED else None
    earlier = state.decision(click.click_id)
    if earlier is not None:
        owned = not earlier[2]  # decided when this click arrived, not by the impression
        return ClickDecision(Outcome.DUPLICATE_CLICK, attribution=attribution if owned else None)
    decided = replace(
        state,
        decided_clicks=(*state.decided_clicks, (click.click_id, click.event_time_ms, False)),
    )
    return ClickDecision(outcome, attribution=attribution, impression_state=decided)


def on_impression(
    window: JoinWindow,
    state: ImpressionState | None,
    pending: tuple[Click, ...],
    impression: Impression,
) -> ImpressionDecision:
    if state is not None:
        # A replay or a second impression of the auction: the first one stays. Clicks never
        # stay pending next to a stored impression, so nothing new is resolved; the
        # attributions this impression owns are emitted again (see ImpressionState).
        first = state.impression
        again = tuple(
            Attribution.of(first, Click(cid, first.auction_id, t))
            for cid, t, by_impression in state.decided_clicks
            if by_impression and window.classify(first.event_time_ms, t) is Outcome.JOINED
        )
        return ImpressionDecision(state, attributions=again, duplicate=True)
    decided: list[tuple[str, int, bool]] = []
    attributions: list[Attribution] = []
    resolved: list[tuple[Click, Outcome]] = []
    for click in pending:
        if any(d[0] == click.click_id for d in decided):
            continue
        decided.append((click.click_id, click.event_time_ms, True))
        outcome = window.classify(impression.event_time_ms, click.event_time_ms)
        resolved.append((click, outcome))
        if outcome is Outcome.JOINED:
            attributions.append(Attribution.of(impression, click))
    return ImpressionDecision(
        ImpressionState(impression, tuple(decided)),
        attributions=tuple(attributions),
        resolved=tuple(resolved),
    )


def impression_expired(window: JoinWindow, state: ImpressionState, clicks_clock_ms: int) -> bool:
    return clicks_clock_ms > window.impression_expires_after(state.impression)


def expire_pending(
    window: JoinWindow, pending: tuple[Click, ...], impressions_clock_ms: int
) -> tuple[tuple[Click, ...], tuple[Click, ...]]:
    """Split pending clicks into (still pending, expired as unmatched)."""
    keep = tuple(
        c for c in pending if impressions_clock_ms <= window.pending_click_expires_after(c)
    )
    gone = tuple(c for c in pending if impressions_clock_ms > window.pending_click_expires_after(c))
    return keep, gone


@dataclass
class PartitionClocks:
    """Highest event time seen per side in one partition (stream time, never goes back)."""

    impressions_ms: int = -1
    clicks_ms: int = -1

    def saw_impression(self, impression: Impression) -> None:
        self.impressions_ms = max(self.impressions_ms, impression.event_time_ms)

    def saw_click(self, click: Click) -> None:
        self.clicks_ms = max(self.clicks_ms, click.event_time_ms)


@dataclass(frozen=True)
class ExpiryBuckets:
    """Time buckets that index which auctions may expire when.

    Each table keeps, next to its auction entries, one index entry per bucket
    listing the auctions whose expiry time falls in it, plus the sorted list of
    buckets that have entries (so a sweep never probes empty buckets). A bucket
    is swept once the driving clock has passed its end, so every auction listed
    in it has expired by then. Narrow buckets keep each index write small.
    """

    width_ms: int

    def bucket_of(self, expires_after_ms: int) -> int:
        return expires_after_ms // self.width_ms

    def due_at(self, bucket: int) -> int:
        """The lowest clock at which a sweep drops ``bucket``: its end."""
        # Bucket b covers [b*w, (b+1)*w); an entry in it expires once clock > its time,
        # guaranteed for all of them when clock >= (b+1)*w.
        return (bucket + 1) * self.width_ms

    def due(self, live: list[int], clock_ms: int) -> list[int]:
        """The live buckets whose end the clock has passed."""
        return [b for b in live if self.due_at(b) <= clock_ms]

    def is_due(self, bucket: int, clock_ms: int) -> bool:
        """Whether a sweep at ``clock_ms`` drops ``bucket`` (see `due`)."""
        return self.due_at(bucket) <= clock_ms

    def next_due_ms(self, live: list[int]) -> int | None:
        """The lowest clock at which a sweep of these (sorted) live buckets finds one due."""
        return self.due_at(live[0]) if live else None

    @staticmethod
    def with_bucket(live: list[int], bucket: int) -> list[int] | None:
        """``live`` with ``bucket`` added, or None when it is there already."""
        if bucket in live:
            return None
        return sorted([*live, bucket])
