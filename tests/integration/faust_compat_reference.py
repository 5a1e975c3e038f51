"""The Faust compatibility suite's input, the results it must give, and how a run compares.

The input is a fixed sequence of checkins (``apps/faust_compat/checkins.py``): people joining and
leaving locations, one location at a time, with event times 100 ms apart. The reference is
computed from that input alone, in plain Python, from what Faust's user guide says each table
and window does; nothing of Faust or streamapp is used to compute it. One reading follows what
Faust does where its guide says otherwise: ``.now()`` on a hopping table reads the earliest
window holding the wall clock (``window.earliest`` in Faust's ``_windowed_now``), while the
guide says a hopping table is always read at the latest window holding a timestamp.

At-least-once lets the group process again the records a killed worker had not committed
(``replayable``: offsets at or past the group's committed offset at the kill, up to the
takeover). ``Expected.allowance`` is how many of those fall in what a count counts (a key, or
its window), so a count may exceed the reference by that much and no more. Last values and
sets are exact: processing a suffix of a key's operations again, in order, ends in the same
state.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The app's windows (apps/faust_compat/checkins.py), in seconds as Faust reads timestamps.
TUMBLING_S = 10.0
HOPPING_S, HOPPING_STEP_S = 600.0, 120.0

#: What each row of the results is about: the Faust feature that gives it.
VISITS = "Table(default=int)"
PRESENT = "SetTable, via group_by"
WHEREABOUTS = "GlobalTable, on every worker"
TUMBLING_CURRENT = "tumbling .current()"
TUMBLING_VALUE = "tumbling .value(), relative_to_stream"
HOPPING_CURRENT = "hopping .current()"
HOPPING_NOW = "hopping .now(), in a web view"
HEADCOUNT = "timer on the leader"
FEATURES = (
    VISITS,
    PRESENT,
    WHEREABOUTS,
    TUMBLING_CURRENT,
    TUMBLING_VALUE,
    HOPPING_CURRENT,
    HOPPING_NOW,
    HEADCOUNT,
)


@dataclass(frozen=True)
class Checkin:
    seq: int
    person: str
    location: str
    action: str  # "join" or "leave"
    ts_ms: int

    @property
    def ts(self) -> float:
        return self.ts_ms / 1000.0

    def value(self) -> dict[str, Any]:
        """The record's value as the app's ``Checkin`` model reads it (JSON)."""
        return {
            "person": self.person,
            "location": self.location,
            "action": self.action,
            "seq": self.seq,
        }


def make_checkins(
    count: int, *, people: int, locations: int, start_ms: int, spacing_ms: int = 100
) -> list[Checkin]:
    """``count`` checkins of random people (a fixed seed): each one leaves the location they are
    at, or joins a random one, so people come back to locations they left."""
    rng = random.Random(20_240_934)
    at: dict[str, str] = {}
    out: list[Checkin] = []
    for seq in range(count):
        person = f"person-{rng.randrange(people):02d}"
        if person in at:
            location, action = at.pop(person), "leave"
        else:
            location, action = f"loc-{rng.randrange(locations):02d}", "join"
            at[person] = location
        out.append(Checkin(seq, person, location, action, start_ms + seq * spacing_ms))
    return out


@dataclass(frozen=True)
class Expected:
    """A key's reference value, and how far above it at-least-once may take a count."""

    value: Any
    allowance: int = 0


def _counted(
    counted: Iterable[Checkin], window: Iterable[Checkin], replayable: Collection[int]
) -> Expected:
    """The number of ``counted`` records; at-least-once may add each replayable record of the
    ``window`` read once more (one processed before the kill, past the one being read, is in
    the state the replay of an earlier one reads)."""
    return Expected(len(list(counted)), sum(1 for r in window if r.seq in replayable))


def _step_start(ts: float, step: float) -> float:
    return (ts // step) * step


def reference(
    checkins: Sequence[Checkin], replayable: Collection[int]
) -> dict[str, dict[str, Any]]:
    """Every feature's reference, ``key -> Expected``, except `HOPPING_NOW` (see `now_reference`).

    ``replayable``: the seqs of the records a kill may have made a worker process twice.
    Window readings are keyed ``person#seq``: what the agent read right after counting that
    checkin, its person's checkins so far in the checkin's window.
    """
    by_person: dict[str, list[Checkin]] = {}
    for checkin in checkins:
        by_person.setdefault(checkin.person, []).append(checkin)
    present: dict[str, set[str]] = {}
    whereabouts: dict[str, str] = {}
    for checkin in checkins:
        members = present.setdefault(checkin.location, set())
        if checkin.action == "join":
            members.add(checkin.person)
            whereabouts[checkin.person] = checkin.location
        else:
            members.discard(checkin.person)
            whereabouts[checkin.person] = ""
    out: dict[str, dict[str, Any]] = {
        VISITS: {p: _counted(records, records, replayable) for p, records in by_person.items()},
        PRESENT: {loc: Expected(sorted(members)) for loc, members in present.items()},
        WHEREABOUTS: {p: Expected(loc) for p, loc in whereabouts.items()},
        HEADCOUNT: {
            loc: Expected(n) for loc, n in Counter(v for v in whereabouts.values() if v).items()
        },
        TUMBLING_CURRENT: {},
        HOPPING_CURRENT: {},
    }
    for person, records in by_person.items():
        for i, checkin in enumerate(records):
            key = f"{person}#{checkin.seq}"
            tumbling = _step_start(checkin.ts, TUMBLING_S)
            window = [r for r in records if _step_start(r.ts, TUMBLING_S) == tumbling]
            out[TUMBLING_CURRENT][key] = _counted(
                (r for r in window if r.seq <= checkin.seq), window, replayable
            )
            # The latest hopping window holding the checkin starts at its step; the checkins
            # before it in that window are those of the same step (event times only grow).
            hopping = _step_start(checkin.ts, HOPPING_STEP_S)
            window = [r for r in records if hopping <= r.ts < hopping + HOPPING_S]
            out[HOPPING_CURRENT][key] = _counted(
                (r for r in records[: i + 1] if _step_start(r.ts, HOPPING_STEP_S) == hopping),
                window,
                replayable,
            )
    # relative_to_stream(): .value() is the window of the event, as .current().
    out[TUMBLING_VALUE] = dict(out[TUMBLING_CURRENT])
    return out


def earliest_hopping_start(clock: float) -> float:
    """Where the earliest hopping window holding ``clock`` starts: the one Faust's ``.now()``
    reads (see the module's docstring)."""
    return _step_start(clock, HOPPING_STEP_S) - HOPPING_S + HOPPING_STEP_S


def now_reference(
    checkins: Sequence[Checkin], replayable: Collection[int], person: str, start: float
) -> Expected:
    """A person's checkins in the hopping window starting at ``start``."""
    window = [c for c in checkins if c.person == person and start <= c.ts < start + HOPPING_S]
    return _counted(window, window, replayable)


@dataclass
class Outcome:
    """One feature's results on one engine, against the reference."""

    engine: str
    feature: str
    keys: int
    wrong: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    over: dict[str, str] = field(default_factory=dict)

    @property
    def right(self) -> bool:
        return not self.wrong and not self.missing


def compare(
    engine: str, feature: str, expected: Mapping[str, Expected], got: Mapping[str, Any]
) -> Outcome:
    """Missing: a key without a result. Wrong: a value other than the reference, or a count
    below it or beyond its allowance, or a key the reference does not have. Over-counted: a
    count above the reference within its allowance (at-least-once after the kill)."""
    outcome = Outcome(engine, feature, len(expected))
    for key, want in sorted(expected.items()):
        if key not in got:
            outcome.missing.append(key)
            continue
        value = got[key]
        if value == want.value:
            continue
        if (
            isinstance(value, int)
            and isinstance(want.value, int)
            and want.value < value <= want.value + want.allowance
        ):
            outcome.over[key] = f"{value} for {want.value} (+{want.allowance} replayable)"
        else:
            outcome.wrong[key] = f"{value!r}, want {want.value!r}" + (
                f" (+{want.allowance} replayable)" if want.allowance else ""
            )
    for key in sorted(set(got) - set(expected)):
        outcome.wrong[key] = f"{got[key]!r}, not in the reference"
    return outcome


def _first(details: Mapping[str, str] | Sequence[str], n: int = 3) -> str:
    items = (
        [f"{k}: {v}" for k, v in details.items()] if isinstance(details, Mapping) else list(details)
    )
    more = f" (+{len(items) - n} more)" if len(items) > n else ""
    return "; ".join(items[:n]) + more


def results_table(outcomes: Iterable[Outcome]) -> str:
    """The outcomes as a Markdown table, with the first few keys of each kind."""
    lines = [
        "| engine | feature | keys | wrong | missing | over-counted | first wrong / missing |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for o in outcomes:
        first = "; ".join(part for part in (_first(o.wrong), _first(o.missing)) if part)
        lines.append(
            f"| {o.engine} | {o.feature} | {o.keys} | {len(o.wrong)} | {len(o.missing)} "
            f"| {len(o.over)} | {first} |"
        )
    return "\n".join(lines)
