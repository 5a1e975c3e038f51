"""The worker page's group picture (`streamapp.ops.group_page`), from hand-made assignment views."""

from __future__ import annotations

from typing import Any

from streamapp.ops.group_page import HISTORY_SHOWN, group_picture, peer_urls


def _view(client_id: str, generation: int, **parts: Any) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "member_id": f"m-{client_id}",
        "generation": generation,
        "host": f"host-{client_id}",
        "rack": None,
        "active": parts.get("active", {}),
        "standby": parts.get("standby", {}),
        "warmup": parts.get("warmup", {}),
        "replica_lag": parts.get("replica_lag", {}),
        "recovery": {"records_replayed_total": 7, "last_rebalance": {"records_replayed": 7}},
        "recovering": {"in_recovery": False, "partitions_remaining": 0, "records_remaining": 0},
        "rebalances": 1,
        "followup_pending": False,
        "history": parts.get("history", []),
    }


def test_peer_urls_start_with_this_worker_and_name_each_once() -> None:
    assert peer_urls("http://a:1/", ["http://c:3", "http://a:1", "http://b:2/"]) == [
        "http://a:1",
        "http://b:2",
        "http://c:3",
    ]
    assert peer_urls("http://a:1", []) == ["http://a:1"]


def test_workers_sorted_naturally_and_partitions_name_their_holders() -> None:
    views = {
        "http://w10": _view("w10", 3, active={"t": [2, 3]}, standby={"t-changelog": [0]}),
        "http://w2": _view(
            "w2",
            3,
            active={"t": [1, 0]},
            warmup={"t-changelog": [2]},
            replica_lag={"t-changelog": {"2": 40}},
        ),
    }
    picture = group_picture(views, {"http://w3": "TimeoutError"}, source="http://w2")
    assert [w["client_id"] for w in picture["workers"]] == ["w2", "w10"]
    assert picture["workers"][0]["active"] == {"t": [0, 1]}
    assert picture["generation"] == 3
    assert picture["unreachable"] == [{"url": "http://w3", "error": "TimeoutError"}]
    assert {p: slot["active"] for p, slot in picture["partitions"]["t"].items()} == {
        "0": ["w2"],
        "1": ["w2"],
        "2": ["w10"],
        "3": ["w10"],
    }
    assert picture["partitions"]["t-changelog"]["0"] == {
        "active": [],
        "standby": ["w10"],
        "warmup": [],
    }
    assert picture["replicas"] == [
        {"worker": "w2", "kind": "warmup", "topic": "t-changelog", "partition": 2, "lag": 40},
        {"worker": "w10", "kind": "standby", "topic": "t-changelog", "partition": 0, "lag": None},
    ]


def test_two_actives_of_one_partition_are_both_shown() -> None:
    views = {"a": _view("a", 4, active={"t": [0]}), "b": _view("b", 5, active={"t": [0]})}
    picture = group_picture(views, {}, source="a")
    assert picture["partitions"]["t"]["0"]["active"] == ["a", "b"]
    assert picture["generation"] == 5


def test_history_merges_workers_by_generation_newest_first() -> None:
    def entry(generation: int, at: float, replayed: int, seconds: float) -> dict[str, Any]:
        return {
            "generation": generation,
            "at": at,
            "records_replayed": replayed,
            "seconds_to_resume": seconds,
        }

    views = {
        "a": _view("a", 2, history=[entry(1, 100.0, 5, 1.5), entry(2, 200.0, 0, 0.5)]),
        "b": _view("b", 2, history=[entry(2, 199.0, 3, 2.0), {"generation": None}]),
    }
    history = group_picture(views, {}, source="a")["history"]
    assert history == [
        {
            "generation": 2,
            "at": 199.0,
            "workers": ["a", "b"],
            "records_replayed": 3,
            "seconds_to_resume": 2.0,
        },
        {
            "generation": 1,
            "at": 100.0,
            "workers": ["a"],
            "records_replayed": 5,
            "seconds_to_resume": 1.5,
        },
    ]
    many = {"a": _view("a", 30, history=[entry(g, float(g), 0, 0.0) for g in range(30)])}
    shown = group_picture(many, {}, source="a")["history"]
    assert [h["generation"] for h in shown] == list(range(29, 29 - HISTORY_SHOWN, -1))


def test_an_empty_group_has_no_generation() -> None:
    picture = group_picture({}, {"http://x": "refused"}, source="http://x")
    assert picture["generation"] is None
    assert picture["workers"] == [] and picture["partitions"] == {} and picture["history"] == []


def test_fausts_leader_topic_is_left_out_of_the_picture() -> None:
    views = {"a": _view("a", 2, active={"app-__assignor-__leader": [0], "t": [0]})}
    picture = group_picture(views, {}, source="a")
    assert picture["workers"][0]["active"] == {"t": [0]}
    assert set(picture["partitions"]) == {"t"}
