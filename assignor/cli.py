"""``python -m assignor plan FILE|- [--strategy NAME] [--format json|table]``.

`main(argv) -> int` is also what ``streamapp plan`` calls. Exit status 0 on
success, 2 on bad input (unreadable file, invalid JSON, JSON nested too deeply
or with a number too long to decode, a `ScenarioError` such as a partition count
above the model's limits, bad arguments, or a scenario too large for memory)
with exactly one line on stderr and nothing on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, NoReturn

from assignor.errors import ScenarioError
from assignor.natural import natural_key
from assignor.plan import available_strategies, plan

__all__ = ["format_table", "main"]

BAD_INPUT = 2


class _UsageError(Exception):
    pass


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus a message; we promise one line."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


PLAN_DESCRIPTION = (
    "Decide who holds what for a scenario, as a streamapp group leader does at a rebalance, "
    "without Kafka: read a scenario (JSON: topics and partition counts, changelog topics, "
    "members with what they held and the changelog offsets on their disks) and print the "
    "assignment. The scenario and result formats, and the rules a plan keeps, are in "
    "docs/assignment-rules.md."
)


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = _OneLineParser(prog=prog, description="Partition assignment decisions.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)
    planner = commands.add_parser(
        "plan", help="decide an assignment for a scenario", description=PLAN_DESCRIPTION
    )
    planner.add_argument("file", help="scenario JSON file, or - for standard input")
    planner.add_argument(
        "--strategy",
        default="stateful",
        help=f"one of: {', '.join(available_strategies())} (default: stateful, streamapp's own)",
    )
    planner.add_argument(
        "--format",
        choices=("json", "table"),
        default="json",
        help="json: the result object, for tools (default); table: for people, one row per "
        "member with its task counts and the tasks themselves, columns explained above it",
    )
    return parser


def _read(path: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()  # noqa: SIM115
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not UTF-8 text") from None
    where = "stdin" if path == "-" else path
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(
            f"{where}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        # The decoder recurses once per nesting level and gives up near Python's
        # recursion limit (about 1000); a scenario nests five levels at most.
        raise ScenarioError(
            f"{where}: JSON nested too deeply to decode (a scenario nests at most 5 levels)"
        ) from None
    except ValueError:
        # Not a JSONDecodeError (caught above): Python refuses to convert an
        # integer literal longer than its digit limit, a guard against
        # quadratic-time conversion. No count or offset comes near it.
        raise ScenarioError(
            f"{where}: a number has more than {sys.get_int_max_str_digits()} digits"
        ) from None


def _by_group(result: dict[str, Any], placement: dict[str, list[int]]) -> list[int]:
    counts = []
    for group in result["groups"]:
        tasks: set[int] = set()
        for topic in group["topics"]:
            tasks.update(placement.get(topic, ()))
        counts.append(len(tasks))
    return counts


def _task_total(result: dict[str, Any], placement: dict[str, list[int]]) -> int:
    return sum(_by_group(result, placement))


def _tasks(result: dict[str, Any], placement: dict[str, list[int]]) -> str:
    """A member's tasks as ``g<group>[partitions]``: a task is one partition of one group."""
    parts = []
    for i, group in enumerate(result["groups"]):
        tasks: set[int] = set()
        for topic in group["topics"]:
            tasks.update(placement.get(topic, ()))
        if tasks:
            parts.append(f"g{i}[{','.join(str(p) for p in sorted(tasks))}]")
    return " ".join(parts) or "-"


TABLE_LEGEND = (
    "A task is one partition number of a group of co-partitioned topics (g0, g1, ... below): "
    "its topics move together, and a standby or warmup of task g0[3] replays the changelog "
    "partition 3 of group g0.",
    "columns: g0, g1, ...: active tasks of that group; active, standby, warmup: tasks of all "
    "groups; then each member's tasks, as group[partitions].",
)


def format_table(result: dict[str, Any], scenario: dict[str, Any]) -> str:
    """A human table: the groups and what the columns mean, one row per member, the stats."""
    members_in = scenario.get("members", {})
    groups = result["groups"]
    lines = [textwrap.fill(text, width=100) for text in TABLE_LEGEND]
    lines.append("")
    for i, group in enumerate(groups):
        kind = "stateful" if group["stateful"] else "stateless"
        lines.append(f"g{i}: {group['partitions']} tasks, {kind}: {', '.join(group['topics'])}")
    lines.append("")
    header = ["member", "client", "host", "rack", *[f"g{i}" for i in range(len(groups))]]
    header += ["active", "standby", "warmup"]
    rows = [header]
    tasks: list[tuple[str, dict[str, Any]]] = []
    for member_id in sorted(result["members"], key=natural_key):
        share = result["members"][member_id]
        raw = members_in.get(member_id, {})
        per_group = _by_group(result, share["active"])
        rows.append(
            [
                member_id,
                str(raw.get("client_id", member_id)),
                str(raw.get("host") or "-"),
                str(raw.get("rack") or "-"),
                *[str(n) for n in per_group],
                str(sum(per_group)),
                str(_task_total(result, share["standby"])),
                str(_task_total(result, share["warmup"])),
            ]
        )
        tasks.append((member_id, share))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    table = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    table.insert(1, "  ".join("-" * w for w in widths))
    lines += table
    lines.append("")
    name_width = max((len(member_id) for member_id, _ in tasks), default=0)
    for member_id, share in tasks:
        lines.append(
            f"{member_id.ljust(name_width)}  active {_tasks(result, share['active'])}  "
            f"standby {_tasks(result, share['standby'])}  "
            f"warmup {_tasks(result, share['warmup'])}"
        )
    lines.append("")
    lines.append(f"strategy: {result['strategy']}")
    lines.append(f"followup_rebalance: {str(result['followup_rebalance']).lower()}")
    if result["revoking"]:
        lines.append(f"revoking: {json.dumps(result['revoking'], sort_keys=True)}")
    if result["unassigned"]:
        lines.append(f"unassigned: {json.dumps(result['unassigned'], sort_keys=True)}")
    for name, value in sorted(result["stats"].items()):
        lines.append(f"{name}: {value}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, *, prog: str = "assignor") -> int:
    """Run the command line; returns the exit status (see module docs).

    ``prog``: the command as its usage names it (``streamapp`` for ``streamapp plan``).
    """
    try:
        try:
            args = _parser(prog).parse_args(argv)
        except SystemExit as done:  # --help: argparse printed it and wants out
            return done.code if isinstance(done.code, int) else 0
        scenario = _read(args.file)
        result = plan(scenario, strategy=args.strategy)
    except (_UsageError, ScenarioError) as exc:
        message = " ".join(str(exc).split())  # one line, whatever the message held
        print(f"assignor: error: {message}", file=sys.stderr)
        return BAD_INPUT
    except MemoryError:
        # The model's partition limits keep valid scenarios far from this; what
        # is left (a file of many gigabytes) still gets one line, not a traceback.
        print("assignor: error: out of memory reading or planning this scenario", file=sys.stderr)
        return BAD_INPUT
    if args.format == "table":
        print(format_table(result, scenario))
    else:
        print(json.dumps(result, indent=2))
    return 0
