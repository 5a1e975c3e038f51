"""The worker's startup heap is kept out of later collections, and a full collection that
needs it still sees it (`streamapp.startup_heap`; no broker, no timing)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from streamapp import startup_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    """A reference cycle nothing else holds; the weak reference says when it is freed."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The test process's heap back in the collector's care after the test."""
    assert gc.get_freeze_count() == 0
    try:
        yield
    finally:
        gc.unfreeze()


def test_freeze_frees_the_garbage_first_and_leaves_the_rest_out_of_collections(
    unfrozen: None,
) -> None:
    garbage = _cycle()
    kept = _Node()
    kept.other = kept
    assert startup_heap.freeze() == gc.get_freeze_count() > 0
    assert garbage() is None  # collected before the freeze: not kept forever
    frozen = gc.get_objects()
    assert all(obj is not kept for obj in frozen)  # the collector no longer looks at it
    later = _cycle()
    gc.collect()
    assert later() is None  # what is made after the freeze is collected as before


def test_collect_all_frees_a_cycle_that_was_frozen_and_freezes_the_rest_again(
    unfrozen: None,
) -> None:
    was_gc_enabled = gc.isenabled()
    gc.disable()  # only the explicit collections below free a cycle
    try:
        frozen_cycle = _cycle()
        held = frozen_cycle()  # alive while the heap is frozen, garbage after
        startup_heap.freeze()
        del held
        gc.collect()
        assert frozen_cycle() is not None  # a plain collection cannot see it
        startup_heap.collect_all()
        assert frozen_cycle() is None
        assert gc.get_freeze_count() > 0
    finally:
        if was_gc_enabled:
            gc.enable()


def test_collect_all_before_any_freeze_is_a_plain_collection(unfrozen: None) -> None:
    cycle = _cycle()
    startup_heap.collect_all()
    assert cycle() is None
    assert gc.get_freeze_count() == 0
