"""Contract rule 6 with conflicting claims: a restarted worker whose ownership
file carries an older generation gets back its own tasks, not whatever else it
happens to be caught up for.

The situation of a rolling restart: w1 stopped, the group rebalanced its tasks
onto w2 and w3 (generation 7), and w1 comes back claiming what it held at
generation 5, with its state on disk 50 records behind.
"""

from __future__ import annotations

from typing import Any

from assignor import plan

END = 2000


def _member(
    client: str, generation: int, active: list[int], standby: list[int], offset: int
) -> dict[str, Any]:
    return {
        "client_id": client,
        "host": f"host-{client}",
        "subscription": ["events", "counts-changelog"],
        "generation": generation,
        "owned_active": {"events": active, "counts-changelog": active},
        "owned_standby": {"counts-changelog": standby},
        "offsets": {"counts-changelog": {str(p): offset for p in active + standby}},
    }


def _scenario(restarted_offset: int) -> dict[str, Any]:
    return {
        "topics": {"events": 6, "counts-changelog": 6},
        "changelog_topics": ["counts-changelog"],
        "num_standbys": 1,
        "acceptable_recovery_lag": 300,
        "end_offsets": {"counts-changelog": {str(p): END for p in range(6)}},
        "members": {
            "m-w2": _member("w2", 7, [1, 2, 5], [3, 0], END),
            "m-w3": _member("w3", 7, [0, 3, 4], [2, 1], END),
            "m-w1-restarted": _member("w1", 5, [0, 1], [4, 5], restarted_offset),
        },
    }


def _active(result: dict[str, Any], member_id: str) -> list[int]:
    return sorted(result["members"][member_id]["active"].get("events", []))


def test_a_restarted_worker_with_a_stale_generation_gets_its_own_tasks_back() -> None:
    result = plan(_scenario(END - 50))
    assert _active(result, "m-w1-restarted") == [0, 1]
    # The others give up exactly those and keep the rest.
    assert _active(result, "m-w2") == [2, 5]
    assert _active(result, "m-w3") == [3, 4]
    assert result["followup_rebalance"] is False


def test_a_stale_claim_too_far_behind_waits_for_a_warmup() -> None:
    # 1,000 behind with an acceptable lag of 300: not caught up, so the current
    # holders keep the tasks and w1 warms up (KIP-441), whatever it claims.
    result = plan(_scenario(END - 1000))
    assert _active(result, "m-w1-restarted") == []
    assert result["followup_rebalance"] is True
    warmups = result["members"]["m-w1-restarted"]["warmup"].get("counts-changelog", [])
    assert warmups
