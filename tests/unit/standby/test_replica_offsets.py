"""What a worker reports of its replicas as it joins: the later of its store and its recovery."""

from __future__ import annotations

from faust.types import TP

from standby.replica_offsets import applied_next, with_applied

CL = "app-t-changelog"


def test_applied_next_is_one_past_the_last_record_taken_and_skips_replicas_with_none() -> None:
    offsets = {TP(CL, 0): 416, TP(CL, 1): -1, TP(CL, 2): None, TP(CL, 3): 9}
    replicas = [TP(CL, 0), TP(CL, 1), TP(CL, 2), TP(CL, 5)]
    assert applied_next(offsets, replicas) == {TP(CL, 0): 417}


def test_with_applied_raises_a_store_behind_its_buffer_and_never_lowers_one() -> None:
    on_disk = {CL: {0: 17, 1: 300, 4: 8}, "other-changelog": {0: 5}}
    applied = {TP(CL, 0): 417, TP(CL, 1): 200, TP(CL, 2): 50}
    merged = with_applied(on_disk, applied)
    assert merged == {CL: {0: 417, 1: 300, 2: 50, 4: 8}, "other-changelog": {0: 5}}
    assert on_disk[CL] == {0: 17, 1: 300, 4: 8}  # not changed in place
