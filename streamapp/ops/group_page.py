"""The group picture of a worker's page: every worker's ``/streamapp/assignment`` put together.

Pure: `streamapp.ops.group_fetch` asks the workers; this module only combines their answers into
the JSON that ``GET /streamapp/group`` serves and the page (``GET /streamapp/``) draws.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from assignor.faust_names import is_leader_topic
from assignor.natural import natural_key

#: Rebalances the page lists, newest first.
HISTORY_SHOWN = 10
_KINDS = ("active", "standby", "warmup")


def peer_urls(own_url: str, actives_by_url: Iterable[str]) -> list[str]:
    """This worker's URL first, then every other URL the current plan names, each once."""
    urls = [own_url.rstrip("/")]
    for url in sorted(u.rstrip("/") for u in actives_by_url):
        if url not in urls:
            urls.append(url)
    return urls


def group_picture(
    views: Mapping[str, Mapping[str, Any]], errors: Mapping[str, str], *, source: str
) -> dict[str, Any]:
    """``views``: URL -> that worker's assignment view; ``errors``: URL -> why it did not answer."""
    workers = sorted(
        (_worker(url, view) for url, view in views.items()),
        key=lambda w: (natural_key(str(w["client_id"])), w["url"]),
    )
    generations = [w["generation"] for w in workers if isinstance(w["generation"], int)]
    return {
        "source": source,
        "generation": max(generations) if generations else None,
        "workers": workers,
        "unreachable": [{"url": u, "error": e} for u, e in sorted(errors.items())],
        "partitions": _partitions(workers),
        "replicas": _replicas(workers),
        "history": _history(workers),
    }


def _worker(url: str, view: Mapping[str, Any]) -> dict[str, Any]:
    recovery = view.get("recovery") or {}
    return {
        "url": url,
        "client_id": view.get("client_id") or url,
        "member_id": view.get("member_id"),
        "host": view.get("host"),
        "rack": view.get("rack"),
        "generation": view.get("generation"),
        "plan_generation": view.get("plan_generation"),
        **{kind: _sorted_parts(view.get(kind) or {}) for kind in _KINDS},
        "replica_lag": view.get("replica_lag") or {},
        "recovering": view.get("recovering") or {},
        "last_rebalance": recovery.get("last_rebalance") or {},
        "records_replayed_total": recovery.get("records_replayed_total", 0),
        "rebalances": view.get("rebalances", 0),
        "followup_pending": bool(view.get("followup_pending")),
        "history": list(view.get("history") or []),
    }


def _sorted_parts(parts: Mapping[str, Iterable[int]]) -> dict[str, list[int]]:
    shown = ((t, sorted(ps)) for t, ps in sorted(parts.items()) if not is_leader_topic(t))
    return {t: ps for t, ps in shown if ps}


def _partitions(workers: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, list[str]]]]:
    """topic -> partition -> kind -> the client ids holding it so (two actives: mid-rebalance)."""
    out: dict[str, dict[int, dict[str, list[str]]]] = {}
    for w in workers:
        for kind in _KINDS:
            for topic, parts in w[kind].items():
                for p in parts:
                    slot = out.setdefault(topic, {}).setdefault(p, {k: [] for k in _KINDS})
                    slot[kind].append(w["client_id"])
    return {
        topic: {str(p): slots for p, slots in sorted(parts.items())}
        for topic, parts in sorted(out.items())
    }


def _replicas(workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each standby and warmup with its lag (None: not measured yet), for the lag bars."""
    out = []
    for w in workers:
        for kind in ("standby", "warmup"):
            for topic, parts in w[kind].items():
                lags = w["replica_lag"].get(topic, {})
                for p in parts:
                    out.append(
                        {
                            "worker": w["client_id"],
                            "kind": kind,
                            "topic": topic,
                            "partition": p,
                            "lag": lags.get(str(p)),
                        }
                    )
    return out


def _history(workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rebalances by generation, newest first: when the first worker resumed in it, who did,
    the records they replayed and the longest wait to resume."""
    by_generation: dict[int, dict[str, Any]] = {}
    for w in workers:
        for entry in w["history"]:
            generation = entry.get("generation")
            if not isinstance(generation, int):
                continue
            row = by_generation.setdefault(
                generation,
                {
                    "generation": generation,
                    "at": None,
                    "workers": [],
                    "records_replayed": 0,
                    "seconds_to_resume": None,
                },
            )
            at = entry.get("at")
            if isinstance(at, (int, float)) and (row["at"] is None or at < row["at"]):
                row["at"] = at
            row["workers"].append(w["client_id"])
            row["records_replayed"] += entry.get("records_replayed") or 0
            seconds = entry.get("seconds_to_resume")
            if isinstance(seconds, (int, float)):
                row["seconds_to_resume"] = max(row["seconds_to_resume"] or 0.0, seconds)
    rows = sorted(by_generation.values(), key=lambda r: r["generation"], reverse=True)
    return rows[:HISTORY_SHOWN]
