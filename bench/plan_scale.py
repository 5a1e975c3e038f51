"""Scale benchmark of `assignor.plan`: ``stateful`` against stock Faust, same run.

Run with ``make bench`` (or ``.venv/bin/python bench/plan_scale.py``); never in
tests. For each size, a fresh assignment, then the same group after one member
leaves (each strategy starts from its own previous result, with every member's
local state caught up). Timing covers the whole `plan` call on the JSON-shaped
scenario: validation, grouping, decision, result.

Columns: wall time, ratio (faust time / stateful time, measured in this run),
tasks moved (``moved_active``), active spread, standby spread, standbys
missing.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from assignor import plan

#: (tasks, members, strategies)
SIZES: list[tuple[int, int, tuple[str, ...]]] = [
    (2_100, 2_100, ("faust", "stateful")),
    (10_000, 1_000, ("faust", "stateful")),
    (100_000, 2_000, ("stateful",)),
]
STANDBYS = 1
END_OFFSET = 5_000


def scenario(tasks: int, members: int) -> dict[str, Any]:
    """One table: its source topic and changelog, co-partitioned; every task stateful."""
    stateful = tasks
    topics = {"orders": stateful, "orders-changelog": stateful}
    return {
        "topics": topics,
        "changelog_topics": ["orders-changelog"],
        "num_standbys": STANDBYS,
        "end_offsets": {"orders-changelog": {str(p): END_OFFSET for p in range(stateful)}},
        "members": {
            f"member-{i:05d}": {
                "client_id": f"worker-{i:05d}",
                "host": f"host-{i:05d}",
                "rack": f"rack-{i % 3}",
                "subscription": sorted(topics),
            }
            for i in range(members)
        },
    }


def after_leave(base: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``previous`` as everyone's ownership, state caught up, one member gone."""
    members = {}
    for member_id, fields in base["members"].items():
        share = previous["members"][member_id]
        offsets: dict[str, dict[str, int]] = {}
        for placement in (share["active"], share["standby"]):
            for partition in placement.get("orders-changelog", []):
                offsets.setdefault("orders-changelog", {})[str(partition)] = END_OFFSET
        members[member_id] = {
            **fields,
            "generation": 1,
            "owned_active": share["active"],
            "owned_standby": share["standby"],
            "offsets": offsets,
        }
    leaver = sorted(members)[len(members) // 2]
    del members[leaver]
    return {**base, "members": members}


def timed(scenario_: dict[str, Any], strategy: str) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    result = plan(scenario_, strategy=strategy)
    return time.perf_counter() - start, result


def main() -> int:
    rows: list[list[str]] = []
    for tasks, members, strategies in SIZES:
        base = scenario(tasks, members)
        times: dict[tuple[str, str], float] = {}
        stats: dict[tuple[str, str], dict[str, Any]] = {}
        for strategy in strategies:
            print(f"  {tasks} tasks x {members} members, {strategy}: fresh ...", flush=True)
            elapsed, fresh = timed(base, strategy)
            times[(strategy, "fresh")], stats[(strategy, "fresh")] = elapsed, fresh["stats"]
            print(f"    {elapsed:.3f} s; after a member leaves ...", flush=True)
            elapsed, left = timed(after_leave(base, fresh), strategy)
            times[(strategy, "leave")], stats[(strategy, "leave")] = elapsed, left["stats"]
            print(f"    {elapsed:.3f} s", flush=True)
        for case in ("fresh", "leave"):
            for strategy in strategies:
                s = stats[(strategy, case)]
                ratio = "-"
                if strategy == "stateful" and ("faust", case) in times:
                    ratio = f"{times[('faust', case)] / times[(strategy, case)]:.1f}x"
                rows.append(
                    [
                        f"{tasks}x{members}",
                        case,
                        strategy,
                        f"{times[(strategy, case)]:.3f}",
                        ratio,
                        str(s["moved_active"]),
                        str(s["max_active_spread"]),
                        str(s["max_standby_spread"]),
                        str(s["standbys_missing"]),
                    ]
                )
    header = ["tasks x members", "case", "strategy", "time s", "faust/ours"]
    header += ["moved", "active spread", "standby spread", "standbys missing"]
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print()
    for k, row in enumerate(table):
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if k == 0:
            print("  ".join("-" * w for w in widths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
